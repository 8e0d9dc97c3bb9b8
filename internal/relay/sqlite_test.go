package relay_test

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/store/sqlite"
)

var _ relay.Outbox = (*sqlite.Store)(nil)

// slowBroker blocks its first publish for hold (a broker that accepts the
// connection and answers late), then confirms everything; it records every
// id it confirmed.
type slowBroker struct {
	hold    time.Duration
	entered chan struct{}

	mu        sync.Mutex
	calls     int
	confirmed []int64
}

func (b *slowBroker) Publish(ctx context.Context, events []notify.Event) ([]int64, error) {
	b.mu.Lock()
	b.calls++
	first := b.calls == 1
	b.mu.Unlock()
	if first {
		close(b.entered)
		time.Sleep(b.hold) // the broker's silence, not a synchronisation
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range events {
		b.confirmed = append(b.confirmed, e.ID)
	}
	return ids(events), nil
}

func ids(evs []notify.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// Defect: on SQLite the relay held the only write transaction across the
// broker's publish, so creates waited for the broker (p99 30s with a broker
// that never answered). With a publish that takes 5s, creates meanwhile
// finish at once, and nothing is lost once the broker answers.
func TestSlowBrokerDoesNotSlowCreatesOnSQLite(t *testing.T) {
	t.Parallel()
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "herald.db"), sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.NoError(t, s.Migrate(t.Context()))
	const hold = 5 * time.Second
	broker := &slowBroker{hold: hold, entered: make(chan struct{})}
	r, err := relay.New(s, broker, s, relay.Config{Interval: 50 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- r.Run(ctx) }()

	create := func(i int) (int64, time.Duration) {
		start := time.Now()
		c, err := s.Create(t.Context(), notify.NewNotification{Request: notify.CreateRequest{
			UserID: "u", Channel: notify.ChannelEmail, To: "a@example.com", Subject: "s", Body: "b",
		}})
		require.NoError(t, err, "create %d", i)
		return c.Notification.ID, time.Since(start)
	}
	create(-1)
	select {
	case <-broker.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay never published")
	}

	const n, clients = 200, 8
	start := time.Now()
	var (
		mu        sync.Mutex
		latencies []time.Duration
		wg        sync.WaitGroup
	)
	next := make(chan int)
	for range clients {
		wg.Go(func() {
			for i := range next {
				_, d := create(i)
				mu.Lock()
				latencies = append(latencies, d)
				mu.Unlock()
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(latencies)
	p99 := latencies[len(latencies)*99/100-1]
	t.Logf("%d creates from %d clients during a %s publish: p50 %s, p99 %s, max %s, all in %s",
		n, clients, hold, latencies[len(latencies)/2], p99, latencies[len(latencies)-1], elapsed)
	require.Less(t, p99, 500*time.Millisecond, "create p99 while the broker takes its time")
	require.Less(t, elapsed, hold, "the creates waited for the publish")

	// Nothing lost: every row reaches the broker once it answers.
	require.Eventually(t, func() bool {
		st, err := s.OutboxStats(t.Context())
		return err == nil && st.Unprocessed+st.Scheduled == 0
	}, 30*time.Second, 20*time.Millisecond)
	broker.mu.Lock()
	got := slices.Clone(broker.confirmed)
	broker.mu.Unlock()
	slices.Sort(got)
	require.Len(t, slices.Compact(got), n+1, "every outbox row published")
	cancel()
	require.NoError(t, <-runErr)
}
