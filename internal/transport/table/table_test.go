package table_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/sqlite"
	"github.com/heraldhq/herald/internal/transport/table"
)

// shutdownDuringClaim is the real store, except that the consumer's
// shutdown begins the moment its first claim has committed.
type shutdownDuringClaim struct {
	*sqlite.Store
	stop   context.CancelFunc
	claims atomic.Int32
}

func (q *shutdownDuringClaim) Claim(ctx context.Context, token string, limit int, lease time.Duration) ([]notify.Message, error) {
	msgs, err := q.Store.Claim(ctx, token, limit, lease)
	if q.claims.Add(1) == 1 {
		q.stop()
	}
	return msgs, err
}

// Rows claimed as a shutdown begins are handed back at once, not left leased
// to a consumer that will never handle them until the lease runs out.
func TestShutdownHandsBackClaimedRows(t *testing.T) {
	t.Parallel()
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "herald.db"), sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.NoError(t, s.Migrate(t.Context()))
	for i := range 3 {
		_, err := s.Create(t.Context(), notify.NewNotification{Request: notify.CreateRequest{
			UserID: "u", Channel: notify.ChannelEmail, To: "a@example.com", Subject: "s", Body: "b",
		}})
		require.NoError(t, err, "create %d", i)
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	q := &shutdownDuringClaim{Store: s, stop: cancel}
	tr, err := table.New(q, nil, table.Config{Lease: time.Hour})
	require.NoError(t, err)
	var handled atomic.Int32
	require.NoError(t, tr.Consume(ctx, func(context.Context, notify.Delivery) { handled.Add(1) }))
	require.EqualValues(t, 1, q.claims.Load())
	require.Zero(t, handled.Load(), "nothing is handed to the worker once the shutdown began")

	msgs, err := s.Claim(t.Context(), "next-worker", 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, msgs, 3, "the next worker gets the rows at once")
	for _, m := range msgs {
		require.Zero(t, m.RetryCount, "handing back is not a retry")
	}
}

// A retry delay of zero is honoured, not replaced by a default: the retried
// row is due again at once.
func TestZeroRetryDelayRetriesAtOnce(t *testing.T) {
	t.Parallel()
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "herald.db"), sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.NoError(t, s.Migrate(t.Context()))
	_, err = s.Create(t.Context(), notify.NewNotification{Request: notify.CreateRequest{
		UserID: "u", Channel: notify.ChannelEmail, To: "a@example.com", Subject: "s", Body: "b",
	}})
	require.NoError(t, err)

	tr, err := table.New(s, s, table.Config{RetryDelays: []time.Duration{0}, PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	retries := make(chan int, 2)
	require.NoError(t, tr.Consume(ctx, func(ctx context.Context, d notify.Delivery) {
		retries <- d.Message().RetryCount
		if d.Message().RetryCount == 0 {
			assert.NoError(t, d.Retry(ctx, "451 try later"))
			return
		}
		assert.NoError(t, d.Ack(ctx))
		cancel()
	}))
	require.Len(t, retries, 2, "the retry did not come back within the test's five seconds")
	require.Equal(t, 0, <-retries)
	require.Equal(t, 1, <-retries)
}
