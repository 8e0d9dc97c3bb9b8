package worker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// A freed send slot goes to the high delivery waiting, though bulk and
// normal ones waited longer; within a priority, first come first served;
// one that gives up passes a slot handed to it on.
func TestSendSlotsHighFirst(t *testing.T) {
	t.Parallel()
	s := newSendSlots(1)
	ctx := t.Context()
	long := time.Now().Add(time.Minute)
	require.True(t, s.take(ctx, notify.RankBulk, long))

	got := make(chan string, 4)
	waitFor := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			w := 0
			for _, q := range s.waiting {
				w += len(q)
			}
			return w == n
		}, 5*time.Second, time.Millisecond)
	}
	start := func(name string, rank int) {
		go func() {
			if s.take(ctx, rank, long) {
				got <- name
			}
		}()
	}
	start("bulk-1", notify.RankBulk)
	waitFor(1)
	start("normal", notify.RankNormal)
	waitFor(2)
	start("bulk-2", notify.RankBulk)
	waitFor(3)
	start("high", notify.RankHigh)
	waitFor(4)

	var order []string
	for range 4 {
		s.release()
		order = append(order, <-got)
	}
	require.Equal(t, []string{"high", "normal", "bulk-1", "bulk-2"}, order)

	// A waiter that gives up holds nothing.
	short, cancel := context.WithCancel(ctx)
	done := make(chan bool)
	go func() { done <- s.take(short, notify.RankHigh, long) }()
	waitFor(1)
	cancel()
	require.False(t, <-done)
	s.release()
	require.True(t, s.take(ctx, notify.RankBulk, time.Now()), "the slot is free again")
}
