package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/transport/kafka"
)

// stopBound is how soon after its context ends a Consumer must have
// returned: a worker is expected to exit within 10s of SIGTERM.
const stopBound = 10 * time.Second

// loadEvents returns n events of n different users (keys), so that they run
// side by side.
func loadEvents(n int) []notify.Event {
	evs := make([]notify.Event, n)
	for i := range evs {
		id := int64(i + 1)
		evs[i] = notify.Event{ID: id, Type: notify.EventRequested, OccurredAt: time.Now(),
			Payload: fmt.Appendf(nil, `{"notification_id":"%d","user_id":"user-%d"}`, id, id)}
	}
	return evs
}

// ackSet records acknowledged message ids.
type ackSet struct {
	mu  sync.Mutex
	ids map[int64]bool
}

func (a *ackSet) add(id int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ids == nil {
		a.ids = map[int64]bool{}
	}
	a.ids[id] = true
}

func (a *ackSet) has(id int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ids[id]
}

func (a *ackSet) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.ids)
}

// A Consumer under load, every handler busy (some blocked until their
// context ends, some slow), returns within 10s of its context ending with
// the default ShutdownGrace, and nothing is lost: what it left unsettled
// is delivered to the next consumer of the group.
func TestStopUnderLoadIsBounded(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	cfg := c.config(uniquePrefix(t))
	cfg.ShutdownGrace = 0 // the default, as cmd/herald runs it
	cfg.Prefetch = 8
	const total = 60
	pub := newPublisher(t, cfg)
	evs := loadEvents(total)
	confirmed, err := pub.Publish(t.Context(), evs)
	require.NoError(t, err)
	require.Len(t, confirmed, total)

	var (
		first   ackSet
		mu      sync.Mutex
		blocked int
	)
	src, err := kafka.NewConsumer(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- src.Consume(ctx, func(hctx context.Context, d notify.Delivery) {
			id := d.Message().ID
			if id%3 == 0 {
				// A send that hangs: it ends only when its context does,
				// and leaves the delivery unsettled.
				mu.Lock()
				blocked++
				mu.Unlock()
				<-hctx.Done()
				return
			}
			// A slow send.
			select {
			case <-hctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			if d.Ack(hctx) == nil {
				first.add(id)
			}
		})
	}()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return blocked >= cfg.Prefetch/2 && first.len() > 0
	}, waitFor, 10*time.Millisecond, "the handlers never got busy")

	cancel()
	began := time.Now()
	select {
	case err := <-done:
		require.NoError(t, err)
		t.Logf("Consume returned %s after its context ended", time.Since(began).Round(time.Millisecond))
	case <-time.After(stopBound):
		t.Fatalf("Consume did not return within %s of its context ending", stopBound)
	}
	require.Less(t, first.len(), total, "the first consumer settled everything: no load at the stop")

	var second ackSet
	ctx2, cancel2 := context.WithCancel(t.Context())
	src2, err := kafka.NewConsumer(cfg)
	require.NoError(t, err)
	done2 := make(chan error, 1)
	go func() {
		done2 <- src2.Consume(ctx2, func(hctx context.Context, d notify.Delivery) {
			if d.Ack(hctx) == nil {
				second.add(d.Message().ID)
			}
		})
	}()
	defer func() {
		cancel2()
		assert.NoError(t, <-done2)
	}()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, ev := range evs {
			assert.True(c, first.has(ev.ID) || second.has(ev.ID), "message %d lost", ev.ID)
		}
	}, waitFor, 20*time.Millisecond, "what the stopped consumer left unsettled was not delivered again")
}
