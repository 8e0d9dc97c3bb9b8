package kafka_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/testenv"
	"github.com/heraldhq/herald/internal/transport/kafka"
)

// arrivals records when each message id reached a handler.
type arrivals struct {
	mu sync.Mutex
	at map[int64][]time.Time
}

func (a *arrivals) add(id int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.at == nil {
		a.at = map[int64][]time.Time{}
	}
	a.at[id] = append(a.at[id], time.Now())
}

func (a *arrivals) get(id int64) []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.at[id]...)
}

// consumeAcking runs a Consumer that records and acknowledges every
// delivery until the test ends, and returns when it started.
func consumeAcking(t *testing.T, cfg kafka.Config, a *arrivals, retryUntil int) time.Time {
	t.Helper()
	src, err := kafka.NewConsumer(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	began := time.Now()
	go func() {
		done <- src.Consume(ctx, func(hctx context.Context, d notify.Delivery) {
			a.add(d.Message().ID)
			if d.Message().RetryCount < retryUntil {
				assert.NoError(t, d.Retry(hctx, "try later"))
				return
			}
			assert.NoError(t, d.Ack(hctx))
		})
	}()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	return began
}

// Retried messages come back after their delay, each retry its own delay
// of the schedule, and the copies carry the delay, not a time.
func TestRetryHonoursDelay(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	cfg := c.config(uniquePrefix(t))
	delays := []time.Duration{300 * time.Millisecond, 900 * time.Millisecond}
	cfg.RetryDelays = delays
	pub := newPublisher(t, cfg)
	_, err := pub.Publish(t.Context(), loadEvents(1))
	require.NoError(t, err)

	var a arrivals
	consumeAcking(t, cfg, &a, 3)
	require.Eventually(t, func() bool { return len(a.get(1)) == 4 }, waitFor, 10*time.Millisecond, "the retries never came back")
	at := a.get(1)
	for i, d := range []time.Duration{delays[0], delays[1], delays[1]} {
		gap := at[i+1].Sub(at[i])
		require.GreaterOrEqual(t, testenv.Waited(at[i], at[i+1]), testenv.NotBefore(d), "retry %d came back early", i+1)
		require.Less(t, gap, d+5*time.Second, "retry %d came back late", i+1)
	}
	copies := readTopic(t, cfg, cfg.Topics().Retry)
	require.Len(t, copies, 3)
	for i, r := range copies {
		require.Equal(t, strconv.FormatInt(delays[min(i, 1)].Milliseconds(), 10), header(r, kafka.HeaderRetryDelay), "copy %d", i+1)
		require.Empty(t, header(r, kafka.HeaderDueAt), "copy %d carries a due time", i+1)
	}
	for _, r := range readTopic(t, cfg, cfg.Topics().Requested) {
		require.Empty(t, header(r, kafka.HeaderRetryDelay), "a forwarded copy kept its delay")
	}
}

// A retry copy is held for its delay from when the Consumer read it,
// whatever time another process's clock wrote on it: a copy from a producer
// whose clock is ten hours ahead is not held for hours, one from a producer
// ten hours behind is not released before its delay; copies written before
// x-retry-delay-ms (x-due-at only) are held the schedule's delay, not until
// the time they carry.
func TestRetryDelayIgnoresWritersClock(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	cfg := c.config(uniquePrefix(t))
	const schedule = 700 * time.Millisecond
	cfg.RetryDelays = []time.Duration{schedule}
	require.NoError(t, kafka.EnsureTopics(t.Context(), cfg))

	ahead := time.Now().Add(10 * time.Hour).UnixMilli()
	behind := time.Now().Add(-10 * time.Hour).UnixMilli()
	copies := []struct {
		id      int64
		delay   string // x-retry-delay-ms; "" for none
		dueAt   int64  // x-due-at; 0 for none
		atLeast time.Duration
	}{
		{id: 1, delay: "400", dueAt: ahead, atLeast: 400 * time.Millisecond},
		{id: 2, delay: "1500", dueAt: behind, atLeast: 1500 * time.Millisecond},
		{id: 3, dueAt: ahead, atLeast: schedule},  // an old copy, clock ahead
		{id: 4, dueAt: behind, atLeast: schedule}, // an old copy, clock behind
	}
	cl, err := kgo.NewClient(cfg.ConnOpts()...)
	require.NoError(t, err)
	defer cl.Close()
	for _, cp := range copies {
		r := &kgo.Record{Topic: cfg.Topics().Retry, Key: []byte("user-" + strconv.FormatInt(cp.id, 10)),
			Value: []byte(`{"notification_id":"` + strconv.FormatInt(cp.id, 10) + `"}`),
			Headers: []kgo.RecordHeader{
				{Key: kafka.HeaderMessageID, Value: []byte(strconv.FormatInt(cp.id, 10))},
				{Key: kafka.HeaderType, Value: []byte(notify.EventRequested)},
				{Key: kafka.HeaderRetryCount, Value: []byte("1")},
			}}
		if cp.delay != "" {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: kafka.HeaderRetryDelay, Value: []byte(cp.delay)})
		}
		if cp.dueAt != 0 {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: kafka.HeaderDueAt, Value: strconv.AppendInt(nil, cp.dueAt, 10)})
		}
		require.NoError(t, cl.ProduceSync(t.Context(), r).FirstErr())
	}

	var a arrivals
	// The copies were in the topic before the Consumer started, so it read
	// each after began: arriving before began+delay would be early.
	began := consumeAcking(t, cfg, &a, 0)
	for _, cp := range copies {
		require.Eventually(t, func() bool { return len(a.get(cp.id)) > 0 }, waitFor, 10*time.Millisecond,
			"copy %d was held (its writer's clock said %s)", cp.id, time.UnixMilli(cp.dueAt))
		waited := a.get(cp.id)[0].Sub(began)
		require.GreaterOrEqual(t, waited, cp.atLeast, "copy %d was released early", cp.id)
		require.Less(t, waited, cp.atLeast+10*time.Second, "copy %d was held too long", cp.id)
	}
}
