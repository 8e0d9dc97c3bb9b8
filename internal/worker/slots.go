package worker

import (
	"context"
	"sync"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// sendSlots are the worker's send slots (Config.Sends), handed out by
// priority (issue 34, point 5): a slot that frees goes to the longest
// waiting delivery of the highest priority waiting, so a high delivery
// waits behind no bulk one for a slot, whatever the transport handed the
// worker before it. Within a priority the order is first come, first
// served. A slot freed is handed over directly, waking only its taker.
type sendSlots struct {
	mu      sync.Mutex
	cap     int
	used    int
	waiting [notify.RankCount][]*slotWaiter
}

// slotWaiter is one delivery waiting for a slot; granted, with ready
// closed, once a slot is handed to it.
type slotWaiter struct {
	ready   chan struct{}
	granted bool
}

func newSendSlots(n int) *sendSlots { return &sendSlots{cap: n} }

// take waits until until at most for a slot, in rank's turn.
func (s *sendSlots) take(ctx context.Context, rank int, until time.Time) bool {
	s.mu.Lock()
	if s.used < s.cap && s.nobodyWaits() {
		s.used++
		s.mu.Unlock()
		return true
	}
	w := &slotWaiter{ready: make(chan struct{})}
	s.waiting[rank] = append(s.waiting[rank], w)
	s.mu.Unlock()

	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	select {
	case <-w.ready:
		return true
	case <-timer.C:
	case <-ctx.Done():
	}
	s.mu.Lock()
	if w.granted {
		// Handed a slot as it gave up: pass it on.
		s.mu.Unlock()
		s.release()
		return false
	}
	q := s.waiting[rank]
	for i, x := range q {
		if x == w {
			s.waiting[rank] = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
	return false
}

// release gives a slot back: to the first waiter of the highest priority
// waiting, or to the pool.
func (s *sendSlots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for r := range s.waiting {
		if q := s.waiting[r]; len(q) > 0 {
			w := q[0]
			s.waiting[r] = q[1:]
			w.granted = true
			close(w.ready)
			return
		}
	}
	s.used--
}

func (s *sendSlots) nobodyWaits() bool {
	for _, q := range s.waiting {
		if len(q) > 0 {
			return false
		}
	}
	return true
}
