package consume

import "sync"

// Held collects the deliveries of a session left unsettled (by their
// handler, or never handed to one because a stop began), to be handed back
// when the session stops. It is safe for concurrent use; the zero value is
// empty.
type Held[T any] struct {
	mu    sync.Mutex
	items []T
}

// Add keeps d for the hand-back.
func (h *Held[T]) Add(d T) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.items = append(h.items, d)
}

// Take returns what was kept, in the order it was added, and empties h:
// each delivery is handed back once.
func (h *Held[T]) Take() []T {
	h.mu.Lock()
	defer h.mu.Unlock()
	items := h.items
	h.items = nil
	return items
}
