package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/pgtest"
	"github.com/heraldhq/herald/internal/testkit/smtptest"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// stack is the production shape: PostgreSQL, RabbitMQ (a vhost of the
// test's own), an SMTP server, and herald processes started on demand.
type stack struct {
	t    *testing.T
	db   string
	amqp string
	smtp *smtptest.Server
	dir  string
	env  map[string]string
	api  client
}

func newStack(t *testing.T, env map[string]string) *stack {
	t.Helper()
	// A migrated database, copied from a template: herald migrate on an
	// empty PostgreSQL database is the test of its own (TestTimesInUTCOutsideUTC,
	// TestPgBouncerProcesses, TestStartupLogsDatabaseReachability).
	s := &stack{t: t, db: pgtest.URL(t), amqp: testenv.Vhost(t), smtp: smtptest.Start(t), dir: t.TempDir()}
	s.env = map[string]string{
		"HERALD_DATABASE_URL":   s.db,
		"HERALD_BROKER_URL":     s.amqp,
		"HERALD_SMTP_URL":       s.smtp.URL(),
		"HERALD_SMTP_FROM":      "herald@example.com",
		"HERALD_RELAY_INTERVAL": "200ms",
	}
	for k, v := range env {
		s.env[k] = v
	}
	return s
}

// start runs one herald command with the stack's environment plus extra.
func (s *stack) start(args ...string) *proc {
	return s.startWith(nil, args...)
}

func (s *stack) startWith(extra map[string]string, args ...string) *proc {
	env := map[string]string{}
	for k, v := range s.env {
		env[k] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	return startHerald(s.t, s.dir, env, args...)
}

// startAPI runs herald api on a free port and waits until it is healthy.
func (s *stack) startAPI(extra map[string]string) *proc {
	addr := freeAddr(s.t)
	env := map[string]string{"HERALD_HTTP_ADDR": addr}
	for k, v := range extra {
		env[k] = v
	}
	p := s.startWith(env, "api")
	s.api = client{base: "http://" + addr}
	waitHTTP(s.t, s.api.base+"/healthz")
	return p
}

// waitStatus polls a notification until it has the status.
func (s *stack) waitStatus(id, status string, within time.Duration) notification {
	s.t.Helper()
	var n notification
	require.Eventually(s.t, func() bool {
		n = s.api.get(s.t, id)
		return n.Status == status
	}, within, 20*time.Millisecond, "notification %s never became %s (last: %+v)", id, status, n)
	return n
}

func (s *stack) count(query string, args ...any) int {
	s.t.Helper()
	return count(s.t, s.db, query, args...)
}

// channel opens an AMQP channel on the stack's vhost.
func (s *stack) channel() *amqp.Channel {
	s.t.Helper()
	conn, err := amqp.Dial(s.amqp)
	require.NoError(s.t, err)
	s.t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(s.t, err)
	return ch
}

// drain takes every message from a queue with basic.get.
func drain(t *testing.T, ch *amqp.Channel, queue string) []amqp.Delivery {
	t.Helper()
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(queue, true)
		require.NoError(t, err)
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

// publish publishes one event by hand, as a plain AMQP client would, and
// waits for the broker's confirm. A mandatory publish that came back
// unroutable (the queue is declared a moment before its binding) is
// published again until the binding routes it.
func publish(t *testing.T, ch *amqp.Channel, id int64, body []byte) {
	t.Helper()
	publishTyped(t, ch, id, "notification.requested", body)
}

// publishTyped is publish with another event type.
func publishTyped(t *testing.T, ch *amqp.Channel, id int64, typ string, body []byte) {
	t.Helper()
	require.NoError(t, ch.Confirm(false))
	returns := ch.NotifyReturn(make(chan amqp.Return, 256))
	msgID := strconv.FormatInt(id, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "notifications", "notification.requested", true, false, amqp.Publishing{
			ContentType: "application/json", DeliveryMode: amqp.Persistent, Type: typ,
			MessageId: msgID, Body: body,
		})
		require.NoError(t, err)
		ok, err := dc.WaitContext(ctx)
		require.NoError(t, err)
		require.True(t, ok, "broker nacked the publish")
		// The broker sends basic.return before the confirm of a returned
		// message, so a return, if any, is already queued.
		returned := false
		for drained := false; !drained; {
			select {
			case r := <-returns:
				returned = returned || r.MessageId == msgID
			default:
				drained = true
			}
		}
		if !returned {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("message %s was returned unroutable until the deadline", msgID)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitTopology waits until a herald process has declared the contract's
// topology on the stack's vhost (a passive declare of a missing queue
// closes its channel, so each try gets a channel of its own).
func (s *stack) waitTopology() {
	s.t.Helper()
	conn, err := amqp.Dial(s.amqp)
	require.NoError(s.t, err)
	defer conn.Close()
	require.Eventually(s.t, func() bool {
		ch, err := conn.Channel()
		if err != nil {
			return false
		}
		defer ch.Close()
		_, err = ch.QueueDeclarePassive("notifications.send", true, false, false, false, nil)
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "no herald process declared the topology")
}

// queueDepth returns the messages ready in a queue of the stack's vhost, or
// -1 while the queue does not exist (a passive declare of a missing queue
// closes its channel, so each call has a channel of its own).
func (s *stack) queueDepth(name string) int {
	s.t.Helper()
	conn, err := amqp.Dial(s.amqp)
	require.NoError(s.t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(s.t, err)
	q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err != nil {
		return -1
	}
	return q.Messages
}

// waitOutboxEmpty waits until no outbox row is unprocessed. A worker can
// send (and commit sent) before the relay's transaction that marks the row
// commits, or before the table transport's Finish: "sent" comes first.
func (s *stack) waitOutboxEmpty() {
	s.t.Helper()
	require.Eventually(s.t, func() bool {
		return s.count("SELECT count(*) FROM outbox WHERE processed_at IS NULL") == 0
	}, 30*time.Second, 20*time.Millisecond, "outbox rows left unprocessed")
}
