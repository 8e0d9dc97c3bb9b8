package wake

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func (h *Hub) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// A subscription leaves nothing behind once its context ends.
func TestSubscriptionsAreReleased(t *testing.T) {
	t.Parallel()
	var h Hub
	ctx, cancel := context.WithCancel(t.Context())
	var chans []<-chan struct{}
	for range 50 {
		chans = append(chans, h.Subscribe(ctx))
	}
	done, doneCancel := context.WithCancel(t.Context())
	doneCancel()
	over := h.Subscribe(done)
	_, open := <-over
	require.False(t, open, "a subscription whose context is over is closed at once")
	require.Equal(t, 50, h.len())

	h.Wake() // never blocks, even with signals already pending
	h.Wake()
	cancel()
	require.Eventually(t, func() bool { return h.len() == 0 }, 5*time.Second, 5*time.Millisecond)
	for _, ch := range chans {
		n := 0
		for range ch { // drains a pending signal, then sees the close
			n++
		}
		require.Equal(t, 1, n, "wake-ups are coalesced")
	}
	h.Wake() // no subscriber left: nothing to send on, nothing to panic on
}

// OnFirst and OnLast bracket every stretch with subscribers, and Close
// ends the last stretch and every later subscription.
func TestHooksAndClose(t *testing.T) {
	t.Parallel()
	var events []string
	h := &Hub{
		OnFirst: func() { events = append(events, "first") },
		OnLast:  func() { events = append(events, "last") },
	}
	ctx, cancel := context.WithCancel(t.Context())
	a := h.Subscribe(ctx)
	b := h.Subscribe(ctx)
	cancel()
	for range a {
	}
	for range b {
	}
	require.Eventually(t, func() bool { return h.len() == 0 }, 5*time.Second, time.Millisecond)

	c := h.Subscribe(t.Context())
	h.Close()
	_, open := <-c
	require.False(t, open)
	h.Close()
	_, open = <-h.Subscribe(t.Context())
	require.False(t, open, "a subscription after Close is closed at once")
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Equal(t, []string{"first", "last", "first", "last"}, events)
}
