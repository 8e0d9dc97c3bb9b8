// Package wake fans one store's "outbox rows were committed" signal out to
// every subscriber (a relay, a table transport worker) without ever
// blocking the writer: each subscriber has a channel holding at most one
// pending wake-up, and one that has not taken its last one yet needs no
// second, since it will look at the table anyway.
//
// It lives beside the store engines, not in notify: it is plumbing that only
// the engines share, not a domain type other parts speak.
package wake

import (
	"context"
	"sync"
)

// Hub is the set of a store's subscribers. The zero value is ready to use;
// it is safe for concurrent use and must not be copied after first use.
type Hub struct {
	// OnFirst, when set, runs when the first subscriber arrives (again),
	// and OnLast when the last one leaves, so that a store runs what feeds
	// the hub (PostgreSQL's LISTEN connection) only while someone waits.
	// Both run with the hub locked: they must not block, nor call the hub.
	OnFirst, OnLast func()

	mu     sync.Mutex
	closed bool
	// subs maps each subscriber's channel to the func that stops watching
	// its context.
	subs map[chan struct{}]func() bool
}

// Subscribe returns a channel that receives a value on every Wake, at most
// one pending, and is closed when ctx ends or the hub closes. After Close,
// or with ctx ended already, it is closed at once.
func (h *Hub) Subscribe(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || ctx.Err() != nil {
		close(ch)
		return ch
	}
	if h.subs == nil {
		h.subs = make(map[chan struct{}]func() bool)
	}
	if len(h.subs) == 0 && h.OnFirst != nil {
		h.OnFirst()
	}
	// AfterFunc, not a goroutine per subscriber waiting on ctx: nothing is
	// parked while the subscription lives. It cannot run before the lock
	// is released, so the entry below is there when it does.
	h.subs[ch] = context.AfterFunc(ctx, func() { h.unsubscribe(ch) })
	return ch
}

// unsubscribe removes ch and closes it, under the lock so that Wake never
// sends on a closed channel. A channel Close removed already is left alone.
func (h *Hub) unsubscribe(ch chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[ch]; !ok {
		return
	}
	delete(h.subs, ch)
	close(ch)
	if len(h.subs) == 0 && h.OnLast != nil {
		h.OnLast()
	}
}

// Wake hands every subscriber a wake-up, without blocking.
func (h *Hub) Wake() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Close closes every subscriber's channel (running OnLast if there was
// one) and makes later subscriptions closed from the start. Calling it
// again does nothing.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	had := len(h.subs) > 0
	for ch, stop := range h.subs {
		stop()
		delete(h.subs, ch)
		close(ch)
	}
	if had && h.OnLast != nil {
		h.OnLast()
	}
}
