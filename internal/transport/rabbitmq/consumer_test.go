package rabbitmq_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/testlog"
	"github.com/heraldhq/herald/internal/transport/consume"
	"github.com/heraldhq/herald/internal/transport/rabbitmq"
)

func TestConsumeAckEmptiesQueue(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	cfg.Prefetch = 3
	p := newPublisher(t, cfg)
	evs := events(1, 10)
	confirmed, err := p.Publish(context.Background(), evs)
	require.NoError(t, err)
	require.Len(t, confirmed, 10)

	var rec recorder
	stop, _ := consumer(t, cfg, func(ctx context.Context, d notify.Delivery) {
		rec.add(d.Message())
		assert.NoError(t, d.Ack(ctx))
	})
	require.Eventually(t, func() bool { return len(rec.list()) == 10 }, waitFor, 10*time.Millisecond)
	require.NoError(t, stop())

	require.ElementsMatch(t, ids(evs), rec.ids())
	for _, m := range rec.list() {
		require.Equal(t, notify.EventRequested, m.Type)
		require.Equal(t, evs[m.ID-1].Payload, m.Payload)
		require.Zero(t, m.RetryCount)
	}
	ch := adminChannel(t, cfg)
	require.Zero(t, queueLen(t, ch, cfg.Topology().SendQueue), "acked messages must be gone after the consumer stopped")
}

func TestRetryPublishesCopyToRetryQueue(t *testing.T) {
	t.Parallel()
	cfg := setup(t) // retry delay of a minute: the copy stays put
	p := newPublisher(t, cfg)
	ev := events(42, 1)
	_, err := p.Publish(context.Background(), ev)
	require.NoError(t, err)

	retried := make(chan error, 1)
	stop, _ := consumer(t, cfg, func(ctx context.Context, d notify.Delivery) {
		retried <- d.Retry(ctx, "smtp: 451 try later")
	})
	select {
	case err := <-retried:
		require.NoError(t, err)
	case <-time.After(waitFor):
		t.Fatal("no delivery")
	}
	require.NoError(t, stop())

	ch := adminChannel(t, cfg)
	top := cfg.Topology()
	require.Zero(t, queueLen(t, ch, top.SendQueue), "the original must be acked")
	d := get(t, ch, top.RetryQueue)
	require.Equal(t, "42", d.MessageId)
	require.Equal(t, ev[0].Payload, d.Body)
	require.Equal(t, notify.EventRequested, d.Type)
	require.Equal(t, "application/json", d.ContentType)
	require.Equal(t, uint8(amqp.Persistent), d.DeliveryMode)
	require.True(t, ev[0].OccurredAt.Equal(d.Timestamp))
	require.EqualValues(t, 1, d.Headers["x-retry-count"])
	require.Equal(t, "smtp: 451 try later", d.Headers["x-last-error"])
}

func TestRetryComesBackAfterDelay(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	cfg.RetryDelay = 200 * time.Millisecond
	p := newPublisher(t, cfg)
	_, err := p.Publish(context.Background(), events(7, 1))
	require.NoError(t, err)

	var rec recorder
	var retryAt, backAt atomic.Int64
	consumer(t, cfg, func(ctx context.Context, d notify.Delivery) {
		rec.add(d.Message())
		if d.Message().RetryCount < 2 {
			retryAt.Store(time.Now().UnixNano())
			assert.NoError(t, d.Retry(ctx, "try again"))
			return
		}
		backAt.Store(time.Now().UnixNano())
		assert.NoError(t, d.Ack(ctx))
	})
	require.Eventually(t, func() bool { return len(rec.list()) == 3 }, waitFor, 10*time.Millisecond)
	got := rec.list()
	for i, m := range got {
		require.Equal(t, int64(7), m.ID)
		require.Equal(t, i, m.RetryCount)
	}
	require.GreaterOrEqual(t, time.Duration(backAt.Load()-retryAt.Load()), 150*time.Millisecond,
		"the copy must wait out the retry delay")
}

func TestDeadLetter(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	top := cfg.Topology()
	ch := declared(t, cfg)
	// A message that has been retried three times already, counted with a
	// 32-bit integer as another client might.
	require.NoError(t, ch.Publish(top.Exchange, "notification.requested", true, false, amqp.Publishing{
		Headers:      amqp.Table{"x-retry-count": int32(3)},
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		Type:         notify.EventRequested,
		MessageId:    "9",
		Body:         []byte(`{}`),
	}))

	reason := strings.Repeat("é", 600) // 1200 bytes
	settled := make(chan error, 1)
	var seen atomic.Int64
	stop, _ := consumer(t, cfg, func(ctx context.Context, d notify.Delivery) {
		seen.Store(int64(d.Message().RetryCount))
		settled <- d.DeadLetter(ctx, reason)
	})
	select {
	case err := <-settled:
		require.NoError(t, err)
	case <-time.After(waitFor):
		t.Fatal("no delivery")
	}
	require.NoError(t, stop())
	require.EqualValues(t, 3, seen.Load())

	require.Zero(t, queueLen(t, ch, top.SendQueue))
	d := get(t, ch, top.DeadLetterQueue)
	require.Equal(t, "9", d.MessageId)
	require.Equal(t, []byte(`{}`), d.Body)
	require.EqualValues(t, 3, d.Headers["x-retry-count"])
	last, ok := d.Headers["x-last-error"].(string)
	require.True(t, ok)
	require.Equal(t, strings.Repeat("é", 512), last, "reason truncated to 1 KiB on a rune boundary")
}

func TestReleaseRedelivers(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	p := newPublisher(t, cfg)
	_, err := p.Publish(context.Background(), events(5, 1))
	require.NoError(t, err)

	var rec recorder
	stop, _ := consumer(t, cfg, func(ctx context.Context, d notify.Delivery) {
		rec.add(d.Message())
		if len(rec.list()) == 1 {
			assert.NoError(t, d.Release(ctx, 0))
			return
		}
		assert.NoError(t, d.Ack(ctx))
	})
	require.Eventually(t, func() bool { return len(rec.list()) == 2 }, waitFor, 10*time.Millisecond)
	require.NoError(t, stop())
	got := rec.list()
	require.Equal(t, got[0], got[1], "released unchanged, without counting a retry")
	require.Zero(t, queueLen(t, adminChannel(t, cfg), cfg.Topology().SendQueue))
}

func TestInvalidMessageIDGoesStraightToDLQ(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	cfg.Prefetch = 1
	top := cfg.Topology()
	ch := declared(t, cfg)
	for _, id := range []string{"abc", "", "-3", "0"} {
		require.NoError(t, ch.Publish(top.Exchange, "notification.requested", true, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, Type: notify.EventRequested, MessageId: id, Body: []byte(id),
		}))
	}
	p := newPublisher(t, cfg)
	_, err := p.Publish(context.Background(), events(11, 1))
	require.NoError(t, err)

	var rec recorder
	consumer(t, cfg, func(ctx context.Context, d notify.Delivery) {
		rec.add(d.Message())
		assert.NoError(t, d.Ack(ctx))
	})
	require.Eventually(t, func() bool { return queueLen(t, ch, top.DeadLetterQueue) == 4 }, waitFor, 10*time.Millisecond)
	require.Eventually(t, func() bool { return len(rec.list()) == 1 }, waitFor, 10*time.Millisecond)
	require.Equal(t, []int64{11}, rec.ids(), "only the valid message reaches the handler")
	for _, id := range []string{"abc", "", "-3", "0"} {
		d := get(t, ch, top.DeadLetterQueue)
		require.Equal(t, id, d.MessageId)
		require.Equal(t, "invalid message_id", d.Headers["x-last-error"])
		require.EqualValues(t, 0, d.Headers["x-retry-count"])
	}
}

func TestGracefulStopLetsHandlerFinish(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	p := newPublisher(t, cfg)
	_, err := p.Publish(context.Background(), events(3, 1))
	require.NoError(t, err)

	started := make(chan struct{})
	release := make(chan struct{})
	acked := make(chan error, 1)
	c := startConsumer(t, cfg, func(ctx context.Context, d notify.Delivery) {
		close(started)
		<-release
		if ctx.Err() != nil {
			acked <- ctx.Err()
			return
		}
		acked <- d.Ack(ctx)
	})
	select {
	case <-started:
	case <-time.After(waitFor):
		t.Fatal("no delivery")
	}
	c.cancel()
	// Consume must wait for the handler in flight.
	select {
	case <-c.done:
		t.Fatal("Consume returned while a handler was still running")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-acked, "the handler's ack after the shutdown began")
	require.NoError(t, c.stop())
	require.Zero(t, queueLen(t, adminChannel(t, cfg), cfg.Topology().SendQueue), "acked, so not handed back")
}

// TestRetryQueueDeletedMidRun deletes the retry queue under a running
// consumer. The first retry after it is returned as unroutable: Retry fails,
// the original stays unsettled and Release hands it back. The next retry
// must go through: the consumer declares its topology again after a return,
// instead of failing every retry until the connection drops.
func TestRetryQueueDeletedMidRun(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	cfg.Prefetch = 1
	top := cfg.Topology()
	ch := declared(t, cfg)
	p := newPublisher(t, cfg)
	_, err := p.Publish(context.Background(), events(1, 2))
	require.NoError(t, err)

	type result struct {
		id  int64
		err error
	}
	results := make(chan result, 10)
	var deleted atomic.Bool
	stop, _ := consumer(t, cfg, func(ctx context.Context, d notify.Delivery) {
		id := d.Message().ID
		if id == 2 && !deleted.Load() {
			// Message 1's retry has connected the forwarding publisher.
			_, err := ch.QueueDelete(top.RetryQueue, false, false, false)
			if !assert.NoError(t, err) {
				return
			}
			deleted.Store(true)
		}
		err := d.Retry(ctx, "smtp down")
		if err != nil {
			assert.NoError(t, d.Release(ctx, 0), "release after a failed retry")
		}
		results <- result{id: id, err: err}
	})
	next := func() result {
		t.Helper()
		select {
		case r := <-results:
			return r
		case <-time.After(waitFor):
			t.Fatal("no delivery")
			return result{}
		}
	}
	r := next()
	require.Equal(t, int64(1), r.id)
	require.NoError(t, r.err)
	r = next()
	require.Equal(t, int64(2), r.id)
	require.ErrorContains(t, r.err, "unroutable", "the copy to a deleted queue is returned")
	r = next()
	require.Equal(t, int64(2), r.id, "released, so delivered again")
	require.NoError(t, r.err, "the retry queue must be declared again")
	require.NoError(t, stop())

	require.Zero(t, queueLen(t, ch, top.SendQueue))
	d := get(t, ch, top.RetryQueue)
	require.Equal(t, "2", d.MessageId, "message 1's copy went with the deleted queue")
}

func TestConsumeOutlivesUnreachableBroker(t *testing.T) {
	t.Parallel()
	var logs testlog.Buffer
	cfg := rabbitmq.Config{
		URL: "amqp://guest:secret@127.0.0.1:1/", // nothing listens on port 1
		Settings: consume.Settings{
			ReconnectMin: time.Millisecond,
			ReconnectMax: 5 * time.Millisecond,
			Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
		},
	}
	stop, done := consumer(t, cfg, func(context.Context, notify.Delivery) {
		t.Error("no delivery can come from an unreachable broker")
	})
	require.Eventually(t, func() bool { return strings.Count(logs.String(), "level=WARN") >= 3 },
		waitFor, 5*time.Millisecond, "each failed attempt is logged at WARN")
	select {
	case <-done:
		t.Fatal("Consume gave up during an outage")
	default:
	}
	require.NoError(t, stop())
	require.NotContains(t, logs.String(), "secret", "never log the password")
}

// TestRetryScheduleFollowsList retries with a schedule of three delays: the
// gaps between the deliveries of one message follow the list, the last
// delay repeating, and a short retry never waits behind a longer one that
// was queued before it.
func TestRetryScheduleFollowsList(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	cfg.Prefetch = 1 // the copies are queued in delivery order
	schedule := []time.Duration{300 * time.Millisecond, time.Second, 2 * time.Second}
	cfg.RetryDelays = schedule
	top := cfg.Topology()
	ch := declared(t, cfg)
	// Message 1 has been retried twice already: its next retry is the
	// third, 2s. Message 2's next is its first, 300ms. 1 is queued first.
	for _, m := range []struct {
		id      string
		retries int32
	}{{"1", 2}, {"2", 0}, {"3", 0}} {
		require.NoError(t, ch.Publish(top.Exchange, "notification.requested", true, false, amqp.Publishing{
			Headers: amqp.Table{"x-retry-count": m.retries}, DeliveryMode: amqp.Persistent,
			Type: notify.EventRequested, MessageId: m.id, Body: []byte(`{}`),
		}))
	}

	type arrival struct {
		id, retries int
		at          time.Time
	}
	var mu sync.Mutex
	var got []arrival
	consumer(t, cfg, func(ctx context.Context, d notify.Delivery) {
		m := d.Message()
		mu.Lock()
		got = append(got, arrival{int(m.ID), m.RetryCount, time.Now()})
		mu.Unlock()
		// Retry 1 and 2 once each, 3 four times.
		switch {
		case m.ID == 1 && m.RetryCount < 3, m.ID == 2 && m.RetryCount < 1, m.ID == 3 && m.RetryCount < 4:
			assert.NoError(t, d.Retry(ctx, "451 greylisted"))
		default:
			assert.NoError(t, d.Ack(ctx))
		}
	})
	arrivals := func() []arrival {
		mu.Lock()
		defer mu.Unlock()
		return append([]arrival(nil), got...)
	}
	require.Eventually(t, func() bool { return len(arrivals()) == 2+2+5 }, 3*waitFor, 20*time.Millisecond,
		"arrivals: %v", arrivals)

	var order []int
	byID := map[int][]arrival{}
	for _, a := range arrivals() {
		if a.id != 3 && len(byID[a.id]) > 0 { // a copy coming back
			order = append(order, a.id)
		}
		byID[a.id] = append(byID[a.id], a)
	}
	require.Equal(t, []int{2, 1}, order,
		"message 2's 300ms retry must not wait behind message 1's 2s retry queued before it")

	// Message 3 waits 300ms, 1s, 2s, then 2s again.
	want := []time.Duration{schedule[0], schedule[1], schedule[2], schedule[2]}
	threes := byID[3]
	require.Len(t, threes, 5)
	for i, w := range want {
		gap := threes[i+1].at.Sub(threes[i].at)
		require.Equal(t, i+1, threes[i+1].retries)
		require.GreaterOrEqual(t, gap, w-20*time.Millisecond, "gap before retry %d", i+1)
		if i+1 < len(want) && want[i+1] > w {
			require.Less(t, gap, want[i+1], "retry %d waited as long as a later one", i+1)
		}
	}
	require.Zero(t, queueLen(t, ch, top.SendQueue))
}

// TestConsumeReturnsPromptlyUnderLoad stops a consumer holding a full
// prefetch of 50 deliveries, besides many more waiting in the queue. As the
// shutdown begins, its handlers hand half of them back with Release and
// leave the other half unsettled to the transport. Consume must return
// within 10s (a bound on the shutdown, not a performance figure), and every
// message must be back in the send queue, none dead-lettered.
func TestConsumeReturnsPromptlyUnderLoad(t *testing.T) {
	t.Parallel()
	const bound = 10 * time.Second
	cfg := setup(t)
	cfg.Prefetch = 50
	top := cfg.Topology()
	p := newPublisher(t, cfg)
	evs := events(1, 200)
	confirmed, err := p.Publish(context.Background(), evs)
	require.NoError(t, err)
	require.Len(t, confirmed, len(evs))

	var held atomic.Int64
	stopping := make(chan struct{})
	c := startConsumer(t, cfg, func(ctx context.Context, d notify.Delivery) {
		held.Add(1)
		select {
		case <-stopping:
		case <-ctx.Done():
		}
		if d.Message().ID%2 == 0 {
			assert.NoError(t, d.Release(ctx, 0))
		}
	})
	require.Eventually(t, func() bool { return held.Load() == int64(cfg.Prefetch) }, waitFor, 10*time.Millisecond,
		"the consumer never held a full prefetch")

	began := time.Now()
	close(stopping)
	c.cancel()
	select {
	case <-c.done:
	case <-time.After(bound):
		t.Fatalf("Consume did not return within %s of its context's end", bound)
	}
	t.Logf("Consume returned %s after its context ended", time.Since(began).Round(time.Millisecond))
	require.NoError(t, c.stop())
	require.LessOrEqual(t, held.Load(), int64(cfg.Prefetch), "no delivery handled after the shutdown began")

	ch := adminChannel(t, cfg)
	require.Eventually(t, func() bool { return queueLen(t, ch, top.SendQueue) == len(evs) }, waitFor, 10*time.Millisecond,
		"every message back in the send queue")
	require.Zero(t, queueLen(t, ch, top.DeadLetterQueue))

	var rec recorder
	consumer(t, cfg, func(ctx context.Context, d notify.Delivery) {
		rec.add(d.Message())
		assert.NoError(t, d.Ack(ctx))
	})
	require.Eventually(t, func() bool { return len(rec.list()) >= len(evs) }, waitFor, 10*time.Millisecond)
	require.ElementsMatch(t, ids(evs), rec.ids(), "each message exactly once")
}
