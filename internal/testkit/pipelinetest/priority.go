package pipelinetest

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/mail"
	"github.com/heraldhq/herald/internal/worker"
)

// PriorityStore is a Store that takes batch creates, as the API's
// POST /notifications/batch writes them: the suite queues its bulk
// backlog with them.
type PriorityStore interface {
	Store
	CreateBatch(ctx context.Context, nns []notify.NewNotification) ([]notify.BatchResult, error)
}

// priorityBulk is how many bulk notifications RunPriority queues:
// 20,000, or HERALD_TEST_PRIORITY_BULK (issue 34's figure is 200,000).
func priorityBulk(t *testing.T) int {
	if v := os.Getenv("HERALD_TEST_PRIORITY_BULK"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "HERALD_TEST_PRIORITY_BULK")
		return n
	}
	return 20_000
}

// priorityHighs is how many high notifications RunPriority sends, one at
// a time, while the bulk backlog drains.
const priorityHighs = 20

// RunPriority is issue 34's priority test (point 5): with a backlog of
// bulk notifications queued (priorityBulk) and draining to a sink that
// takes no time, high notifications created one after another are each
// delivered before the bulk backlog drains: every high one is delivered
// while most of the bulk backlog is still undelivered. The order is
// asserted, never a time; each high one's create-to-delivered time is
// logged, with its p50, p99 and max, as the figure.
func RunPriority(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Helper()
	h := newHarness(t)
	store, ok := h.Store.(PriorityStore)
	require.True(t, ok, "the harness's store takes batch creates")
	timeout := 120*time.Second + time.Duration(priorityBulk(t))*time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	e := &env{h: h, ctx: ctx}
	bulk := priorityBulk(t)

	start := time.Now()
	for i := 0; i < bulk; i += 1000 {
		nns := make([]notify.NewNotification, min(1000, bulk-i))
		for j := range nns {
			r := request(i + j)
			r.Priority = notify.PriorityBulk
			nns[j] = notify.NewNotification{Request: r}
		}
		res, err := store.CreateBatch(ctx, nns)
		require.NoError(t, err)
		for _, r := range res {
			require.NoError(t, r.Err)
		}
	}
	t.Logf("%d bulk notifications queued in %s", bulk, time.Since(start).Round(time.Millisecond))

	sink := newOrderSink()
	e.h.Pump(t, ctx)
	email, err := mail.NewSender(from, sink)
	require.NoError(t, err)
	w, err := worker.New(e.h.NewSource(t, SourceConfig{RetryDelay: RetryDelay, Prefetch: 32, Lease: lease}), e.h.Store,
		map[string]worker.Channel{notify.ChannelEmail: {Sender: email, Provider: "sink"}},
		worker.Config{MaxRetries: maxRetries, StoreBackoff: 100 * time.Millisecond, Registerer: prometheus.NewRegistry(),
			Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	require.NoError(t, err)
	e.background(t, "worker", w.Run)

	// The drain is under way before the first high one.
	require.Eventually(t, func() bool { return sink.count() >= min(bulk/20, 1000) }, timeout/2, tick, "the bulk drain starts")

	var took []time.Duration
	for i := range priorityHighs {
		r := request(bulk + i)
		r.Priority = notify.PriorityHigh
		at := time.Now()
		c, err := store.Create(ctx, notify.NewNotification{Request: r})
		require.NoError(t, err)
		id := messageID(c.Notification)
		var pos int
		require.Eventually(t, func() bool {
			var ok bool
			pos, ok = sink.position(id)
			return ok
		}, timeout/2, time.Millisecond, "high notification %d delivered", i)
		d, _ := sink.deliveredAt(id)
		took = append(took, d.Sub(at))
		// pos counts every delivery before it, bulk and high: the bulk
		// ones delivered by then are at most pos.
		require.Less(t, pos, bulk/2+priorityHighs,
			"high notification %d is delivered while most of the bulk backlog waits (delivered %d of %d bulk before it)", i, pos-i, bulk)
	}
	drained := sink.count()
	slices.Sort(took)
	t.Logf("%d high notifications behind %d bulk: create to delivered p50 %s, p99 %s, max %s; %d deliveries in all when the last was delivered",
		priorityHighs, bulk, took[len(took)/2].Round(time.Microsecond), took[(len(took)*99+99)/100-1].Round(time.Microsecond),
		took[len(took)-1].Round(time.Microsecond), drained)
}

// orderSink is an EmailSender that takes no time and records the order
// and the time each Message-ID was first delivered.
type orderSink struct {
	mu    sync.Mutex
	order map[string]int
	at    map[string]time.Time
}

func newOrderSink() *orderSink {
	return &orderSink{order: map[string]int{}, at: map[string]time.Time{}}
}

func (s *orderSink) Send(_ context.Context, m mail.Email) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.order[m.MessageID]; !ok {
		s.order[m.MessageID] = len(s.order)
		s.at[m.MessageID] = time.Now()
	}
	return nil
}

func (s *orderSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.order)
}

func (s *orderSink) position(id string) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.order[id]
	return p, ok
}

func (s *orderSink) deliveredAt(id string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.at[id]
	return t, ok
}
