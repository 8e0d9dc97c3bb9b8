package rabbitmq_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/testkit/testenv"
	"github.com/heraldhq/herald/internal/transport/consume"
	"github.com/heraldhq/herald/internal/transport/rabbitmq"
	"github.com/heraldhq/herald/internal/worker"
)

var (
	_ relay.Publisher = (*rabbitmq.Publisher)(nil)
	_ worker.Source   = (*rabbitmq.Consumer)(nil)
)

const waitFor = 10 * time.Second

// TestMain deletes the RabbitMQ vhosts testenv.Vhost made that remain.
func TestMain(m *testing.M) {
	code := m.Run()
	if err := testenv.DeleteVhosts(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// setup returns a configuration with a topology of the test's own, deleted
// when the test ends.
func setup(t *testing.T) rabbitmq.Config {
	t.Helper()
	url, prefix := testenv.AMQP(t)
	cfg := rabbitmq.Config{
		URL: url,
		Settings: consume.Settings{
			Prefix:        prefix,
			ReconnectMin:  20 * time.Millisecond,
			ReconnectMax:  200 * time.Millisecond,
			ShutdownGrace: 5 * time.Second,
		},
		RetryDelay:     time.Minute,
		ConfirmTimeout: 5 * time.Second,
		ConnectionName: "herald-test-" + prefix,
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rabbitmq.Delete(ctx, cfg); err != nil {
			t.Errorf("delete topology: %v", err)
		}
	})
	return cfg
}

// adminChannel opens a plain channel for the test to inspect and prod the
// broker with.
func adminChannel(t *testing.T, cfg rabbitmq.Config) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(cfg.URL)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	return ch
}

// declared returns an admin channel with the topology declared.
func declared(t *testing.T, cfg rabbitmq.Config) *amqp.Channel {
	t.Helper()
	ch := adminChannel(t, cfg)
	require.NoError(t, cfg.Topology().Declare(ch))
	return ch
}

func newPublisher(t *testing.T, cfg rabbitmq.Config) *rabbitmq.Publisher {
	t.Helper()
	p, err := rabbitmq.NewPublisher(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

func events(first int64, n int) []notify.Event {
	evs := make([]notify.Event, n)
	for i := range evs {
		id := first + int64(i)
		evs[i] = notify.Event{
			ID:         id,
			Type:       notify.EventRequested,
			Payload:    fmt.Appendf(nil, `{"notification_id":"%d"}`, id),
			OccurredAt: time.Date(2026, 5, 1, 12, 0, int(id%60), 0, time.UTC),
		}
	}
	return evs
}

func ids(evs []notify.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// queueLen is the number of ready messages in a queue.
func queueLen(t *testing.T, ch *amqp.Channel, queue string) int {
	t.Helper()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(t, err)
	return q.Messages
}

// get polls a queue for one message and acknowledges it.
func get(t *testing.T, ch *amqp.Channel, queue string) amqp.Delivery {
	t.Helper()
	var d amqp.Delivery
	require.Eventually(t, func() bool {
		m, ok, err := ch.Get(queue, true)
		require.NoError(t, err)
		d = m
		return ok
	}, waitFor, 10*time.Millisecond, "no message in %s", queue)
	return d
}

// running is a Consume running in the background.
type running struct {
	cancel func()          // ends Consume's context
	done   <-chan struct{} // closed when Consume returned
	stop   func() error    // cancel, wait and return Consume's error
}

// startConsumer runs Consume in the background until stop is called or the
// test ends.
func startConsumer(t *testing.T, cfg rabbitmq.Config, handle func(context.Context, notify.Delivery)) running {
	t.Helper()
	c, err := rabbitmq.NewConsumer(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var cerr error
	go func() {
		defer close(done)
		cerr = c.Consume(ctx, handle)
	}()
	var once sync.Once
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(waitFor):
				t.Error("Consume did not return after its context ended")
			}
		})
		return cerr
	}
	t.Cleanup(func() { _ = stop() })
	return running{cancel: cancel, done: done, stop: stop}
}

// consumer is startConsumer for tests that only need to stop it.
func consumer(t *testing.T, cfg rabbitmq.Config, handle func(context.Context, notify.Delivery)) (stop func() error, done <-chan struct{}) {
	t.Helper()
	r := startConsumer(t, cfg, handle)
	return r.stop, r.done
}

// recorder collects the messages a handler saw.
type recorder struct {
	mu   sync.Mutex
	msgs []notify.Message
}

func (r *recorder) add(m notify.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, m)
}

func (r *recorder) list() []notify.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]notify.Message(nil), r.msgs...)
}

func (r *recorder) ids() []int64 {
	var out []int64
	for _, m := range r.list() {
		out = append(out, m.ID)
	}
	return out
}

// rabbitmqctl runs the broker's CLI (local node only).
func rabbitmqctl(t *testing.T, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", args...).CombinedOutput()
	// assert, not require: it also runs off the test goroutine.
	assert.NoError(t, err, "rabbitmqctl %s: %s", strings.Join(args, " "), out)
	return out
}

// connectionPIDs returns, for each of names, the pids of the broker
// connections its client gave that name, in the form close_connection takes
// (<rabbit@host.N.N.N>; the JSON formatter prints another one). rabbitmqctl
// takes seconds per call on a busy machine, so it lists once for all names.
func connectionPIDs(t *testing.T, names ...string) map[string][]string {
	t.Helper()
	out := rabbitmqctl(t, "-q", "list_connections", "pid", "client_properties")
	pids := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		pid, props, ok := strings.Cut(line, "\t")
		if !ok {
			continue
		}
		for _, name := range names {
			if strings.Contains(props, fmt.Sprintf("{%q,%q}", "connection_name", name)) {
				pids[name] = append(pids[name], pid)
			}
		}
	}
	return pids
}

// reconnectWait bounds the wait for a closed connection's successor: the
// client's backoff (up to ReconnectMax, 5s) plus rabbitmqctl's listing, which
// takes seconds on a loaded machine, so longer than waitFor.
const reconnectWait = 3 * waitFor

// closeConnections closes the broker connections named names, one each and
// no other, side by side, and returns their pids.
func closeConnections(t *testing.T, names ...string) map[string]string {
	t.Helper()
	old := map[string]string{}
	require.Eventually(t, func() bool {
		pids := connectionPIDs(t, names...)
		for _, name := range names {
			if len(pids[name]) != 1 {
				return false
			}
			old[name] = pids[name][0]
		}
		return true
	}, reconnectWait, 100*time.Millisecond, "connections %v not found, one each", names)
	var wg sync.WaitGroup
	for _, pid := range old {
		wg.Go(func() { rabbitmqctl(t, "close_connection", pid, "herald test: simulated outage") })
	}
	wg.Wait()
	return old
}
