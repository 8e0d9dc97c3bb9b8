package postgres

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/testkit/faultproxy"
)

// A relay batch whose connections drop between the publish and the mark
// (a failover, a pooler restart) still marks what the broker confirmed:
// the rows are processed when relay.Batch returns, not left leased for the
// rest of the lease (a minute) and then published again.
func TestRelayBatchMarksAfterConnectionsDrop(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	direct := migratedURL(t)
	u, err := url.Parse(direct)
	require.NoError(t, err)
	p, err := faultproxy.New(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	u.Host = p.Addr()

	s, err := Open(ctx, u.String(), Config{MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	require.NoError(t, s.Migrate(ctx))
	createN(t, ctx, s, 5)

	var published []int64
	cut := make(chan int, 1)
	n, err := relay.Batch(ctx, s, 10, nil, func(ctx context.Context, events []notify.Event) ([]int64, error) {
		for _, e := range events {
			published = append(published, e.ID)
		}

		before := p.FromClients()
		p.Blackhole()
		go func() {
			deadline := time.Now().Add(20 * time.Second)
			for p.FromClients() == before && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			held := p.FromClients() > before
			n := p.Reset()
			p.Pass()
			if !held {
				n = 0
			}
			cut <- n
		}()
		return published, nil
	})

	require.Positive(t, <-cut, "a connection was cut while the mark was in the proxy")
	require.NoError(t, err, "the mark is tried again on a new connection")
	require.Equal(t, 5, n)
	require.Len(t, published, 5)

	st, err := s.OutboxStats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Unprocessed, "every confirmed row marked processed")
	// Nothing left to publish again.
	n, err = relay.Batch(ctx, s, 10, nil, func(ctx context.Context, events []notify.Event) ([]int64, error) {
		t.Errorf("published again: %d events", len(events))
		return nil, nil
	})

	require.NoError(t, err)
	require.Zero(t, n)
}
