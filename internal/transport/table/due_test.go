package table_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/mongo"
	"github.com/heraldhq/herald/internal/store/postgres"
	"github.com/heraldhq/herald/internal/store/sqlite"
	"github.com/heraldhq/herald/internal/testkit/mongotest"
	"github.com/heraldhq/herald/internal/testkit/pgtest"
	"github.com/heraldhq/herald/internal/transport/table"
)

// dueStores are the stores the table transport runs on, each on a
// database of its own.
var dueStores = map[string]func(t *testing.T) outboxStore{
	"sqlite": func(t *testing.T) outboxStore {
		s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "herald.db"), sqlite.Config{})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		require.NoError(t, s.Migrate(t.Context()))
		return s
	},
	"postgres": func(t *testing.T) outboxStore {
		s, err := postgres.Open(t.Context(), pgtest.URL(t), postgres.Config{MaxConns: 4})
		require.NoError(t, err)
		t.Cleanup(s.Close)
		require.NoError(t, s.Migrate(t.Context()))
		return s
	},
	"mongo": func(t *testing.T) outboxStore {
		s, err := mongo.Open(t.Context(), mongotest.URL(t), mongo.Config{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		require.NoError(t, s.Migrate(t.Context()))
		return s
	},
}

// handBack is a worker for TestHandedBackRowsGoBehindDueRows: it hands back
// every delivery of user "held" with Release(after), as the worker does
// with one it cannot send now (its destination paused, its channel's gate
// closed), and acknowledges every other.
type handBack struct {
	after time.Duration
	mu    sync.Mutex
	held  map[int64]int // hand-backs by row
	acked map[string]bool
}

func (h *handBack) handle(ctx context.Context, d notify.Delivery) {
	var r notify.Requested
	if err := json.Unmarshal(d.Message().Payload, &r); err != nil {
		panic(err)
	}
	if r.UserID == "held" {
		if err := d.Release(ctx, h.after); err == nil {
			h.mu.Lock()
			h.held[d.Message().ID]++
			h.mu.Unlock()
		}
		return
	}
	if err := d.Ack(ctx); err == nil {
		h.mu.Lock()
		h.acked[r.UserID] = true
		h.mu.Unlock()
	}
}

// heldAtLeast reports whether each of n rows was handed back at least k
// times, and the hand-backs in all.
func (h *handBack) heldAtLeast(n, k int) (bool, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	total := 0
	for _, c := range h.held {
		total += c
	}
	if len(h.held) < n {
		return false, total
	}
	for _, c := range h.held {
		if c < k {
			return false, total
		}
	}
	return true, total
}

func (h *handBack) ackedCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.acked)
}

// A window's worth of rows that the worker hands back (Release) does not
// hold up the rows after them (issue 32, point 1): the claim takes due rows
// in due order, and a row handed back is due at its new time, behind every
// row that was due before it. With a delay (30 s: the gate's next trial)
// the rows are simply not due; with none, handed back again and again, the
// rows created after them still come next, since each hand-back puts its
// row behind them (round robin, where the claim's id order took the same
// rows first every time).
func TestHandedBackRowsGoBehindDueRows(t *testing.T) {
	t.Parallel()
	const (
		window = 4 // the transport's prefetch: every place of the window
		others = 10
	)
	for name, open := range dueStores {
		for _, after := range []time.Duration{30 * time.Second, 0} {
			t.Run(fmt.Sprintf("%s/release %s", name, after), func(t *testing.T) {
				t.Parallel()
				s := open(t)
				ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
				defer cancel()
				create := func(user string) {
					t.Helper()
					_, err := s.Create(ctx, notify.NewNotification{Request: notify.CreateRequest{
						UserID: user, Channel: notify.ChannelEmail, To: "a@example.com", Subject: "s", Body: "b",
					}})
					require.NoError(t, err)
				}
				for range window {
					create("held")
				}
				tr, err := table.New(s, s, table.Config{Prefetch: window, Lease: time.Minute, PollInterval: 50 * time.Millisecond})
				require.NoError(t, err)
				h := &handBack{after: after, held: map[int64]int{}, acked: map[string]bool{}}
				done := make(chan error, 1)
				cctx, stop := context.WithCancel(ctx)
				defer func() {
					stop()
					require.NoError(t, <-done)
				}()
				go func() { done <- tr.Consume(cctx, h.handle) }()

				// Every held row handed back: once with a delay, twice
				// (cycling through the window) without.
				times := 1
				if after == 0 {
					times = 2
				}
				require.Eventually(t, func() bool { ok, _ := h.heldAtLeast(window, times); return ok },
					20*time.Second, 10*time.Millisecond, "the held rows were claimed and handed back")
				_, before := h.heldAtLeast(window, times)

				// Rows created after them are claimed and delivered.
				start := time.Now()
				for i := range others {
					create(fmt.Sprintf("other-%d", i))
				}
				deadline := time.Now().Add(10 * time.Second)
				for h.ackedCount() < others && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				_, total := h.heldAtLeast(window, times)
				require.Equal(t, others, h.ackedCount(),
					"rows created after %d handed-back rows were not delivered within 10s (%d hand-backs meanwhile)", window, total-before)
				t.Logf("%d rows delivered in %s behind %d rows handed back with delay %s (%d hand-backs meanwhile)",
					others, time.Since(start).Round(time.Millisecond), window, after, total-before)
				if after > 0 {
					require.Equal(t, window, total, "a row handed back for %s is not claimed again before then", after)
				}
			})
		}
	}
}
