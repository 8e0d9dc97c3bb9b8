package relay_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/testkit/testlog"
)

// busyWaker fires as fast as the relay takes its wake-ups: creates
// arriving without pause.
type busyWaker struct{}

func (busyWaker) Subscribe(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	go func() {
		defer close(ch)
		for {
			select {
			case <-ctx.Done():
				return
			case ch <- struct{}{}:
			}
		}
	}()
	return ch
}

// downPublisher is a broker that is down: every publish fails, after the
// given error.
type downPublisher struct {
	attempts atomic.Int32
	err      error
}

func (p *downPublisher) Publish(context.Context, []notify.Event) ([]int64, error) {
	p.attempts.Add(1)
	return nil, p.err
}

// With the broker down and creates waking the relay constantly, the relay
// keeps to its backoff: wake-ups do not cut it short (1,780 publish attempts
// in 2s before the fix).
func TestBackoffIgnoresWakeUps(t *testing.T) {
	t.Parallel()
	pub := &downPublisher{err: errors.New("dial tcp: connection refused")}
	src := &fakeSource{batch: []notify.Event{{ID: 1}}}
	r, err := relay.New(src, pub, busyWaker{}, relay.Config{MaxBackoff: 5 * time.Second})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	require.NoError(t, r.Run(ctx))
	// Backoff 100ms, 200ms, 400ms, 800ms: attempts at 0, 0.1, 0.3, 0.7,
	// 1.5s. One more allows for a slow machine's timer.
	require.LessOrEqual(t, pub.attempts.Load(), int32(6), "publish attempts in 2s")
	require.GreaterOrEqual(t, pub.attempts.Load(), int32(3), "the relay kept trying")
}

// A publisher error marked permanent (a topology the broker refuses) stops
// the relay loudly: an ERROR record, Run returns the error, Ping reports it.
// Any other error is an outage the relay waits out.
func TestPermanentPublishErrorStopsRelay(t *testing.T) {
	t.Parallel()
	mismatch := errors.New("declare queue notifications.retry: PRECONDITION_FAILED - inequivalent arg 'x-message-ttl'")
	pub := &downPublisher{err: notify.Permanent(mismatch)}
	var logs testlog.Buffer
	r, err := relay.New(&fakeSource{batch: []notify.Event{{ID: 1}}}, pub, busyWaker{}, relay.Config{
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	require.NoError(t, err)
	require.NoError(t, r.Ping(t.Context()), "ready before it runs")

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err = r.Run(ctx)
	require.ErrorIs(t, err, relay.ErrStopped)
	require.ErrorIs(t, err, mismatch)
	require.NoError(t, ctx.Err(), "Run returned on the error, not at the end of the test")
	require.EqualValues(t, 1, pub.attempts.Load(), "no retry of a permanent failure")
	require.Contains(t, logs.String(), "level=ERROR")
	require.Contains(t, logs.String(), "PRECONDITION_FAILED")
	require.ErrorIs(t, r.Ping(t.Context()), relay.ErrStopped)

	// The same failure unmarked is waited out: Run keeps going.
	pub = &downPublisher{err: mismatch}
	r, err = relay.New(&fakeSource{batch: []notify.Event{{ID: 1}}}, pub, nil, relay.Config{})
	require.NoError(t, err)
	ctx, cancel = context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	require.NoError(t, r.Run(ctx))
	require.Greater(t, pub.attempts.Load(), int32(1))
	require.NoError(t, r.Ping(t.Context()))
}

// A store failure that happens to wrap a permanent error does not stop the
// relay: only the publisher's verdict does.
func TestStoreErrorNeverStopsRelay(t *testing.T) {
	t.Parallel()
	src := failingSource{err: notify.Permanent(errors.New("no such table: outbox"))}
	r, err := relay.New(src, &downPublisher{}, nil, relay.Config{})
	require.NoError(t, err)
	_, err = r.RunOnce(t.Context())
	require.Error(t, err)
	require.NotErrorIs(t, err, relay.ErrStopped)
}

type failingSource struct{ err error }

func (s failingSource) LeaseRelay(context.Context, int, []string, string, time.Duration) ([]notify.Event, error) {
	return nil, s.err
}

func (s failingSource) SettleRelay(context.Context, []notify.OutboxKey, []notify.OutboxKey, string) error {
	return s.err
}
