package rabbitmq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/transporttest"
	"github.com/heraldhq/herald/internal/transport/rabbitmq"
)

// TestConformance runs the seam suite on a topology of each subtest's own,
// once with quorum queues and once with classic ones: events go out
// through a Publisher, deliveries come from Consumers, and the dead letters
// are read from the dead-letter queue.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, qtype := range []string{rabbitmq.QueueQuorum, rabbitmq.QueueClassic} {
		t.Run(qtype, func(t *testing.T) {
			t.Parallel()
			conformance(t, qtype)
		})
	}
}

func conformance(t *testing.T, qtype string) {
	transporttest.Run(t, func(t *testing.T) transporttest.Harness {
		base := setup(t)
		base.QueueType = qtype
		// Every consumer declares the retry queue, whose TTL this is: they
		// all have to agree (the publisher declares none).
		base.RetryDelay = transporttest.RetryDelay
		base.ShutdownGrace = 10 * time.Second
		pubCfg := base
		pubCfg.ConnectionName += "publisher"
		pub := newPublisher(t, pubCfg)
		return transporttest.Harness{
			Publish: func(t *testing.T, evs []notify.Event) []notify.Event {
				t.Helper()
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				confirmed, err := pub.Publish(ctx, evs)
				require.NoError(t, err)
				require.Equal(t, ids(evs), confirmed)
				return evs
			},
			NewSource: func(t *testing.T, sc transporttest.SourceConfig) transporttest.Source {
				t.Helper()
				cfg := base
				cfg.RetryDelay = sc.RetryDelay
				cfg.Prefetch = sc.Prefetch
				cfg.ConnectionName += "consumer"
				c, err := rabbitmq.NewConsumer(cfg)
				require.NoError(t, err)
				return c
			},
			DeadLetters: func(t *testing.T) []transporttest.DeadLetter {
				t.Helper()
				return peekDeadLetters(t, base)
			},
		}
	})
}

// peekDeadLetters returns the messages of the dead-letter queue without
// removing them: it gets each one unacknowledged, then closes the
// connection, which hands them all back.
func peekDeadLetters(t *testing.T, cfg rabbitmq.Config) []transporttest.DeadLetter {
	t.Helper()
	conn, err := amqp.Dial(cfg.URL)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	queue := cfg.Topology().DeadLetterQueue
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if aerr := (*amqp.Error)(nil); errors.As(err, &aerr) && aerr.Code == amqp.NotFound {
		return nil // never declared: no dead letters
	}
	require.NoError(t, err)
	var out []transporttest.DeadLetter
	for range q.Messages {
		d, ok, err := ch.Get(queue, false)
		require.NoError(t, err)
		if !ok {
			break
		}
		id, ok := notify.ParseID(d.MessageId)
		require.True(t, ok, "dead letter with message id %q", d.MessageId)
		reason, _ := d.Headers[rabbitmq.HeaderLastError].(string)
		out = append(out, transporttest.DeadLetter{ID: id, Reason: reason})
	}
	return out
}
