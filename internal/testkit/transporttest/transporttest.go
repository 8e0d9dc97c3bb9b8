// Package transporttest is the conformance suite of the delivery seam: every
// transport runs it, and it exercises the transport alone. It publishes
// events, consumes them with a handler and settles them (Ack, Retry,
// DeadLetter, Release), stops consumers with deliveries unsettled and
// replaces them, and checks what comes back. No worker, store logic or
// sender is involved; the whole pipeline is the subject of pipelinetest.
//
// A transport passes the suite with one test file that returns a Harness on
// a topology (or database) of the test's own:
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, func(t *testing.T) transporttest.Harness {
//			return transporttest.Harness{Publish: ..., NewSource: ..., DeadLetters: ...}
//		})
//	}
package transporttest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// RetryDelay is the retry delay of every source the suite asks for. It is
// exported for transports that keep the delay with their topology (RabbitMQ:
// the retry queue's message TTL) and so need it before the first source
// exists, for the publisher behind Publish.
const RetryDelay = 200 * time.Millisecond

// Source is the seam under test: what a worker consumes. It is the same
// method set as worker.Source, declared here so that the suite depends on
// the domain package only.
type Source interface {
	// Consume calls handle for each delivery until ctx ends, then returns
	// nil once every handle call it made has returned.
	Consume(ctx context.Context, handle notify.Handler) error
}

// SourceConfig tunes one source the suite asks for.
type SourceConfig struct {
	// RetryDelay is the wait before a retried delivery comes back. The
	// suite always passes the RetryDelay constant.
	RetryDelay time.Duration
	// Prefetch is the number of deliveries the source hands out at once.
	Prefetch int
	// Lease is how long a delivery its consumer left unsettled stays
	// invisible before another consumer may take it. Only the table
	// transport has leases; a broker hands unsettled deliveries back when
	// the consumer's channel closes.
	Lease time.Duration
}

// DeadLetter is one message in a transport's dead letters.
type DeadLetter struct {
	// ID is the message id.
	ID int64
	// Reason is the reason given to DeadLetter.
	Reason string
}

// Harness is one transport under test, on a topology (or database) that no
// other test uses, removed by t.Cleanup.
type Harness struct {
	// Publish makes evs deliverable, in order, and returns them as a
	// consumer will receive them. A broker transport publishes them as
	// given, through its publisher, and returns them once confirmed. A
	// transport whose messages are rows of the store's making (the table
	// transport: outbox rows) commits one per event and returns those, with
	// the ids and payloads the store gave them. Required.
	Publish func(t *testing.T, evs []notify.Event) []notify.Event
	// NewSource returns a fresh consumer, as a new worker process would
	// have one. Required.
	NewSource func(t *testing.T, cfg SourceConfig) Source
	// DeadLetters returns the messages in the transport's dead letters,
	// without removing them. A transport that cannot tell a dead letter
	// from a message acknowledged after a retry may list both: the suite
	// only looks at the dead letters of messages it never acknowledged
	// after a retry. Required.
	DeadLetters func(t *testing.T) []DeadLetter
	// NoBrokerTime says the transport has no broker to wait in (the table
	// transport): its messages carry no PublishedAt. Every other
	// transport's first deliveries must carry when the relay published
	// them (herald_broker_wait_seconds).
	NoBrokerTime bool
}

const (
	// prefetch is the prefetch of the sources that stop gracefully.
	prefetch = 4
	// lease is the lease of sources that stop gracefully: long enough
	// never to expire during a test.
	lease = 30 * time.Second
	// crashLease is the lease of the source that stops without settling:
	// short, so that its deliveries come back soon.
	crashLease = time.Second
	// quiet is how long the suite watches for a delivery that must not
	// happen: a few retry delays, and a few polls of a table transport.
	quiet = 3 * RetryDelay
)

// wait is how long the suite polls for something asynchronous; tick is how
// often.
const (
	wait = 15 * time.Second
	tick = 10 * time.Millisecond
)

// Run runs the suite. newHarness is called once per subtest, so subtests run
// in parallel on separate topologies.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Helper()
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, e *env)
	}{
		{"Ack", testAck},
		{"Retry", testRetry},
		{"DeadLetter", testDeadLetter},
		{"Release", testRelease},
		{"Park", testPark},
		{"RedeliveryAfterCrash", testRedeliveryAfterCrash},
		{"NothingLostAcrossRestart", testNothingLostAcrossRestart},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			require.NotNil(t, h.Publish, "Harness.Publish")
			require.NotNil(t, h.NewSource, "Harness.NewSource")
			require.NotNil(t, h.DeadLetters, "Harness.DeadLetters")
			// Registered after the harness, so it ends before the harness
			// tears its topology down.
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			t.Cleanup(cancel)
			tc.fn(t, &env{h: h, ctx: ctx})
		})
	}
}

// env is what one subtest works with: its harness and a context ending with
// the test.
type env struct {
	h   Harness
	ctx context.Context
}

// sourceConfig is the configuration of a source that stops gracefully.
func sourceConfig() SourceConfig {
	return SourceConfig{RetryDelay: RetryDelay, Prefetch: prefetch, Lease: lease}
}

// events returns n distinct events of the kind herald publishes, with
// message ids 1 to n.
func events(t *testing.T, n int) []notify.Event {
	t.Helper()
	return eventsFrom(t, 1, n)
}

// eventsFrom returns n distinct events with message ids from first on.
func eventsFrom(t *testing.T, first int64, n int) []notify.Event {
	t.Helper()
	at := time.Now().UTC().Truncate(time.Microsecond)
	evs := make([]notify.Event, n)
	for i := range evs {
		id := first + int64(i)
		payload, err := json.Marshal(notify.Requested{
			NotificationID: notify.FormatID(id),
			UserID:         fmt.Sprintf("user-%d", id),
			Channel:        notify.ChannelEmail,
			To:             fmt.Sprintf("someone-%d@example.com", id),
			Subject:        fmt.Sprintf("Hello %d", id),
			Body:           "Body line one\nline two",
		})
		require.NoError(t, err)
		evs[i] = notify.Event{ID: id, Type: notify.EventRequested, Payload: payload, OccurredAt: at.Add(time.Duration(i) * time.Microsecond),
			Traceparent: fmt.Sprintf("00-4bf92f3577b34da6a3ce929d0e0e%04x-00f067aa0ba9%04x-01", id%0x10000, id%0x10000)}
	}
	return evs
}

// publish publishes n fresh events and returns them as they will be
// delivered.
func (e *env) publish(t *testing.T, n int) []notify.Event {
	t.Helper()
	evs := e.h.Publish(t, events(t, n))
	require.Len(t, evs, n, "Harness.Publish returned another number of events")
	seen := map[int64]bool{}
	for _, ev := range evs {
		require.False(t, seen[ev.ID], "Harness.Publish returned message id %d twice", ev.ID)
		seen[ev.ID] = true
	}
	return evs
}

// delivered is one call of a handler.
type delivered struct {
	msg notify.Message
	at  time.Time
}

// journal records the deliveries a handler saw, and the acknowledgements
// that succeeded.
type journal struct {
	mu    sync.Mutex
	seen  []delivered
	acked map[int64]int
}

func (j *journal) add(m notify.Message) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.seen = append(j.seen, delivered{msg: m, at: time.Now()})
}

func (j *journal) ack(id int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.acked == nil {
		j.acked = map[int64]int{}
	}
	j.acked[id]++
}

func (j *journal) deliveries() []delivered {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]delivered(nil), j.seen...)
}

func (j *journal) len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.seen)
}

// acks returns how often each message was acknowledged successfully.
func (j *journal) acks() map[int64]int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return maps.Clone(j.acked)
}

// ids returns the ids of the deliveries, in the order they came.
func (j *journal) ids() []int64 {
	var out []int64
	for _, d := range j.deliveries() {
		out = append(out, d.msg.ID)
	}
	return out
}

// consumer is a Consume running in the background.
type consumer struct {
	cancel func()          // ends Consume's context
	stop   func()          // cancel, then wait for Consume to return nil
	done   <-chan struct{} // closed when Consume returned
}

// consume runs handle on a fresh source with cfg until stop or the end of
// the test.
func (e *env) consume(t *testing.T, cfg SourceConfig, handle notify.Handler) *consumer {
	t.Helper()
	src := e.h.NewSource(t, cfg)
	require.NotNil(t, src, "Harness.NewSource")
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = src.Consume(ctx, handle)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
				assert.NoError(t, err, "Consume returned an error")
			case <-time.After(wait):
				t.Errorf("Consume did not return within %s after its context ended", wait)
			}
		})
	}
	t.Cleanup(stop)
	return &consumer{cancel: cancel, stop: stop, done: done}
}

// requireMessage requires that m is ev as published, delivered for the
// retries-th time after retries retries.
func requireMessage(t *testing.T, ev notify.Event, m notify.Message, retries int) {
	t.Helper()
	require.Equal(t, ev.ID, m.ID, "message id")
	require.Equal(t, ev.Type, m.Type, "type of message %d", m.ID)
	require.JSONEq(t, string(ev.Payload), string(m.Payload), "payload of message %d", m.ID)
	require.Equal(t, retries, m.RetryCount, "retry count of message %d", m.ID)
	require.True(t, ev.OccurredAt.Equal(m.OccurredAt), "occurred at of message %d: published %s, delivered %s",
		m.ID, ev.OccurredAt, m.OccurredAt)
	// The trace context travels with every copy (retries, hand-backs).
	require.Equal(t, ev.Traceparent, m.Traceparent, "traceparent of message %d", m.ID)
}

// requireQuiet requires that j sees no further delivery for a while.
func requireQuiet(t *testing.T, j *journal, why string) {
	t.Helper()
	n := j.len()
	require.Never(t, func() bool { return j.len() != n }, quiet, tick, why)
}

// byID indexes events by message id.
func byID(evs []notify.Event) map[int64]notify.Event {
	out := make(map[int64]notify.Event, len(evs))
	for _, ev := range evs {
		out[ev.ID] = ev
	}
	return out
}

// Every published message is delivered once, as published, and an
// acknowledged message is gone: the next consumer receives nothing.
func testAck(t *testing.T, e *env) {
	before := time.Now()
	evs := e.publish(t, 10)
	after := time.Now()
	var j journal
	c := e.consume(t, sourceConfig(), func(ctx context.Context, d notify.Delivery) {
		j.add(d.Message())
		if assert.NoError(t, d.Ack(ctx), "ack") {
			j.ack(d.Message().ID)
		}
	})
	require.Eventually(t, func() bool { return len(j.acks()) == len(evs) }, wait, tick, "not every message was acknowledged")
	requireQuiet(t, &j, "an acknowledged message was delivered again")
	c.stop()

	want := byID(evs)
	for _, d := range j.deliveries() {
		ev, ok := want[d.msg.ID]
		require.True(t, ok, "message %d was never published", d.msg.ID)
		requireMessage(t, ev, d.msg, 0)
		if e.h.NoBrokerTime {
			require.True(t, d.msg.PublishedAt.IsZero(), "message %d: published at %s on a transport with no broker time", d.msg.ID, d.msg.PublishedAt)
		} else {
			// A second of slack for a broker's own clock (NATS stamps
			// the stored time).
			require.WithinRange(t, d.msg.PublishedAt, before.Add(-time.Second), after.Add(time.Second),
				"message %d: published at (the start of its time in the broker)", d.msg.ID)
		}
	}
	require.Len(t, j.deliveries(), len(evs), "deliveries")

	var again journal
	e.consume(t, sourceConfig(), func(_ context.Context, d notify.Delivery) { again.add(d.Message()) })
	requireQuiet(t, &again, "the next consumer received an acknowledged message")
	require.Empty(t, e.h.DeadLetters(t))
}

// A retried message comes back after the retry delay with its retry count
// one higher, each time.
func testRetry(t *testing.T, e *env) {
	const retries = 2
	ev := e.publish(t, 1)[0]
	var j journal
	e.consume(t, sourceConfig(), func(ctx context.Context, d notify.Delivery) {
		j.add(d.Message())
		if d.Message().RetryCount < retries {
			assert.NoError(t, d.Retry(ctx, fmt.Sprintf("attempt %d failed", d.Message().RetryCount+1)), "retry")
			return
		}
		if assert.NoError(t, d.Ack(ctx), "ack") {
			j.ack(d.Message().ID)
		}
	})
	require.Eventually(t, func() bool { return len(j.acks()) == 1 }, wait, tick, "the message was never acknowledged")
	requireQuiet(t, &j, "a message acknowledged after its retries was delivered again")

	got := j.deliveries()
	require.Len(t, got, 1+retries, "deliveries")
	for i, d := range got {
		requireMessage(t, ev, d.msg, i)
		if i > 0 {
			// The clocks are the test's and (for some transports) the
			// database's or broker's: allow a little skew.
			require.GreaterOrEqual(t, d.at.Sub(got[i-1].at), RetryDelay*3/4,
				"retry %d came back before the retry delay", i)
		}
	}
}

// A dead-lettered message lands in the dead letters with its reason (the
// last one, after retries) and is not delivered again; an acknowledged one
// does not.
func testDeadLetter(t *testing.T, e *env) {
	evs := e.publish(t, 3)
	atOnce, afterRetry, acked := evs[0].ID, evs[1].ID, evs[2].ID
	var j journal
	e.consume(t, sourceConfig(), func(ctx context.Context, d notify.Delivery) {
		m := d.Message()
		j.add(m)
		switch {
		case m.ID == atOnce:
			assert.NoError(t, d.DeadLetter(ctx, "550 no such mailbox"), "dead-letter")
		case m.ID == afterRetry && m.RetryCount == 0:
			assert.NoError(t, d.Retry(ctx, "451 try later"), "retry")
		case m.ID == afterRetry:
			assert.NoError(t, d.DeadLetter(ctx, "451 still busy"), "dead-letter after a retry")
		default:
			if assert.NoError(t, d.Ack(ctx), "ack") {
				j.ack(m.ID)
			}
		}
	})
	want := []DeadLetter{{ID: atOnce, Reason: "550 no such mailbox"}, {ID: afterRetry, Reason: "451 still busy"}}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.ElementsMatch(c, want, e.h.DeadLetters(t))
	}, wait, tick, "dead letters")
	require.Eventually(t, func() bool { return j.acks()[acked] == 1 }, wait, tick, "the other message was never acknowledged")
	requireQuiet(t, &j, "a dead letter was delivered again")

	count := map[int64]int{}
	for _, id := range j.ids() {
		count[id]++
	}
	require.Equal(t, map[int64]int{atOnce: 1, afterRetry: 2, acked: 1}, count, "deliveries by message id")

	var again journal
	e.consume(t, sourceConfig(), func(_ context.Context, d notify.Delivery) { again.add(d.Message()) })
	requireQuiet(t, &again, "the next consumer received a dead letter")
	require.ElementsMatch(t, want, e.h.DeadLetters(t), "dead letters after a restart")
}

// A released message comes back unchanged: releasing neither counts a retry
// nor forgets one.
func testRelease(t *testing.T, e *env) {
	ev := e.publish(t, 1)[0]
	var j journal
	e.consume(t, sourceConfig(), func(ctx context.Context, d notify.Delivery) {
		j.add(d.Message())
		switch j.len() {
		case 1:
			assert.NoError(t, d.Retry(ctx, "451 try later"), "retry")
		case 2:
			assert.NoError(t, d.Release(ctx, 0), "release")
		default:
			if assert.NoError(t, d.Ack(ctx), "ack") {
				j.ack(d.Message().ID)
			}
		}
	})
	require.Eventually(t, func() bool { return len(j.acks()) == 1 }, wait, tick, "the message was never acknowledged")
	requireQuiet(t, &j, "an acknowledged message was delivered again")
	got := j.deliveries()
	require.Len(t, got, 3, "deliveries")
	requireMessage(t, ev, got[0].msg, 0)
	requireMessage(t, ev, got[1].msg, 1)
	requireMessage(t, ev, got[2].msg, 1)
}

// parkAfter is how long testPark parks a message. parkSlack is how much
// later than that it may come back: a transport may round the wait up
// (RabbitMQ's park queues: 2s has a queue of its own) and polls (the table
// transport, the NATS and Kafka retry schedulers), but a parked message
// that comes back many seconds late delays a notification as much after
// its channel recovered.
const (
	parkAfter = 2 * time.Second
	parkSlack = 4 * time.Second
)

// A parked message (Release with a wait) comes back unchanged, its retry
// count kept, not before its wait has passed and not much later; and while
// it waits it holds nothing of its consumer's: with a prefetch of 1, a
// message published after the park is delivered before the parked one
// comes back, and Release itself does not wait out the park.
func testPark(t *testing.T, e *env) {
	ev := e.publish(t, 1)[0]
	var (
		j        journal
		mu       sync.Mutex
		parkedAt time.Time     // when Release was called; zero until then
		took     time.Duration // how long Release took
		parked   = make(chan struct{})
	)
	e.consume(t, SourceConfig{RetryDelay: RetryDelay, Prefetch: 1, Lease: lease}, func(ctx context.Context, d notify.Delivery) {
		m := d.Message()
		j.add(m)
		mu.Lock()
		park := m.ID == ev.ID && m.RetryCount == 1 && parkedAt.IsZero()
		if park {
			parkedAt = time.Now()
		}
		mu.Unlock()
		switch {
		case m.ID == ev.ID && m.RetryCount == 0:
			// A retry first, so that the park has a retry count to keep.
			assert.NoError(t, d.Retry(ctx, "451 try later"), "retry")
		case park:
			start := time.Now()
			err := d.Release(ctx, parkAfter)
			mu.Lock()
			took = time.Since(start)
			mu.Unlock()
			assert.NoError(t, err, "release with a wait")
			close(parked)
		default:
			if assert.NoError(t, d.Ack(ctx), "ack") {
				j.ack(m.ID)
			}
		}
	})
	select {
	case <-parked:
	case <-time.After(wait):
		t.Fatal("the message was never parked")
	}
	other := e.h.Publish(t, eventsFrom(t, 2, 1))
	require.Len(t, other, 1, "Harness.Publish returned another number of events")
	require.NotEqual(t, ev.ID, other[0].ID, "Harness.Publish returned the parked message's id")
	require.Eventually(t, func() bool { return j.acks()[ev.ID] == 1 && j.acks()[other[0].ID] == 1 }, wait, tick,
		"the messages were never acknowledged")
	requireQuiet(t, &j, "an acknowledged message was delivered again")

	mu.Lock()
	defer mu.Unlock()
	require.Less(t, took, parkAfter/2, "Release waited out the park (or most of it) holding the delivery")
	var back, otherAt time.Time
	var parks []notify.Message
	for _, d := range j.deliveries() {
		switch d.msg.ID {
		case ev.ID:
			parks = append(parks, d.msg)
			if d.msg.RetryCount == 1 && d.at.After(parkedAt) {
				back = d.at
			}
		case other[0].ID:
			otherAt = d.at
		}
	}
	require.Len(t, parks, 3, "deliveries of the parked message: first, retry, back from the park")
	requireMessage(t, ev, parks[2], 1)
	require.GreaterOrEqual(t, testenv.Waited(parkedAt, back), testenv.NotBefore(parkAfter), "the parked message came back before its wait")
	require.LessOrEqual(t, back.Sub(parkedAt), parkAfter+parkSlack, "the parked message came back too late")
	require.True(t, otherAt.Before(back),
		"the message published during the park was delivered after the parked one came back (%s after the park, %s): the park held the consumer's only place",
		otherAt.Sub(parkedAt), back.Sub(parkedAt))
}

// Deliveries a consumer took and never settled (its process was killed)
// reach the next consumer, every one of them, unchanged.
func testRedeliveryAfterCrash(t *testing.T, e *env) {
	evs := e.publish(t, 5)

	var taken journal
	crashed := e.consume(t, SourceConfig{RetryDelay: RetryDelay, Prefetch: 10, Lease: crashLease},
		func(_ context.Context, d notify.Delivery) {
			// Take the delivery and return without settling it, as a
			// process killed mid-delivery would.
			taken.add(d.Message())
		})
	require.Eventually(t, func() bool { return taken.len() == len(evs) }, wait, tick,
		"the first consumer did not take every delivery")
	crashed.stop()

	var j journal
	e.consume(t, sourceConfig(), func(ctx context.Context, d notify.Delivery) {
		j.add(d.Message())
		if assert.NoError(t, d.Ack(ctx), "ack") {
			j.ack(d.Message().ID)
		}
	})
	require.Eventually(t, func() bool { return len(j.acks()) == len(evs) }, wait, tick,
		"the next consumer did not get every unsettled delivery")
	requireQuiet(t, &j, "an acknowledged message was delivered again")
	want := byID(evs)
	for _, d := range j.deliveries() {
		requireMessage(t, want[d.msg.ID], d.msg, 0)
	}
	require.Len(t, j.deliveries(), len(evs), "deliveries")
	require.Empty(t, e.h.DeadLetters(t))
}

// A consumer stopped mid-stream settles what it holds and hands back the
// rest; the next one gets the rest. Every message is delivered and
// acknowledged, and none whose acknowledgement succeeded comes back.
func testNothingLostAcrossRestart(t *testing.T, e *env) {
	const total, free = 50, 10
	evs := e.publish(t, total)

	// The first consumer acknowledges the first free deliveries at once
	// and holds the others until open is closed, so that it is stopped
	// with deliveries in flight.
	var (
		j       journal
		started atomic.Int64
		open    = make(chan struct{})
	)
	handle := func(ctx context.Context, d notify.Delivery) {
		j.add(d.Message())
		if d.Message().RetryCount != 0 {
			t.Errorf("message %d: retry count %d, nothing was retried", d.Message().ID, d.Message().RetryCount)
		}
		if err := d.Ack(ctx); assert.NoError(t, err, "ack") {
			j.ack(d.Message().ID)
		}
	}
	first := e.consume(t, sourceConfig(), func(ctx context.Context, d notify.Delivery) {
		if started.Add(1) > free {
			<-open
		}
		handle(ctx, d)
	})
	require.Eventually(t, func() bool { return started.Load() > free }, wait, tick,
		"the first consumer never had a delivery in flight")

	// Stop with deliveries in flight; they settle once let go.
	first.cancel()
	close(open)
	first.stop()
	before := len(j.acks())
	require.Less(t, before, total, "the first consumer was not stopped mid-stream")

	e.consume(t, sourceConfig(), handle)
	require.Eventually(t, func() bool { return len(j.acks()) == total }, wait, tick,
		"not every message was acknowledged")
	requireQuiet(t, &j, "an acknowledged message was delivered again")

	for id, n := range j.acks() {
		require.Equal(t, 1, n, "message %d acknowledged more than once", id)
	}
	want := byID(evs)
	for _, id := range j.ids() {
		_, ok := want[id]
		require.True(t, ok, "message %d was never published", id)
	}
	require.Empty(t, e.h.DeadLetters(t))
}
