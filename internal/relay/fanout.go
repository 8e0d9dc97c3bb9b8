package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/heraldhq/herald/internal/notify"
)

// FanOut is a Publisher that hands every event to several sinks (the
// broker and the status webhook, say) and confirms an event only once every
// sink confirmed it, so that the row stays unprocessed, and is relayed
// again, while one sink fails. It remembers which sinks confirmed which
// event, so that the next batch offers a row again only to the sinks that
// have not confirmed it yet: a failing webhook does not make the broker
// receive the same status event once per retry. That memory is a
// courtesy, not a guarantee (it is per process, and bounded): consumers
// drop repeats by the event's id anyway.
type FanOut struct {
	sinks []Publisher

	mu sync.Mutex
	// got holds, per event id, the bit set of the sinks that confirmed it,
	// until every sink has.
	got map[int64]uint64
}

// fanOutMemory bounds FanOut's memory of partly confirmed events; beyond
// it the memory starts over (which can only repeat events).
const fanOutMemory = 100_000

// NewFanOut returns a FanOut over sinks (at least one, at most 64).
func NewFanOut(sinks ...Publisher) (*FanOut, error) {
	if len(sinks) == 0 || len(sinks) > 64 {
		return nil, fmt.Errorf("fan-out needs 1 to 64 sinks, got %d", len(sinks))
	}
	return &FanOut{sinks: sinks, got: map[int64]uint64{}}, nil
}

// Publish publishes events to every sink at once and returns the ids every
// sink has confirmed (in this call or an earlier one). Its error joins the
// sinks' errors (notify.IsPermanent holds when it does for one of them,
// and a sink's ParkedError reaches the relay as it came: an event one
// sink parked is no failure of the batch).
func (f *FanOut) Publish(ctx context.Context, events []notify.Event) ([]int64, error) {
	all := uint64(1)<<len(f.sinks) - 1
	f.mu.Lock()
	todo := make([][]notify.Event, len(f.sinks))
	for _, e := range events {
		for i := range f.sinks {
			if f.got[e.ID]&(1<<i) == 0 {
				todo[i] = append(todo[i], e)
			}
		}
	}
	f.mu.Unlock()

	confirmed := make([][]int64, len(f.sinks))
	errs := make([]error, len(f.sinks))
	var wg sync.WaitGroup
	for i, sink := range f.sinks {
		if len(todo[i]) == 0 {
			continue
		}
		wg.Go(func() {
			confirmed[i], errs[i] = sink.Publish(ctx, todo[i])
		})
	}
	wg.Wait()

	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.got) > fanOutMemory {
		clear(f.got)
	}
	for i, ids := range confirmed {
		for _, id := range ids {
			f.got[id] |= 1 << i
		}
	}
	var out []int64
	for _, e := range events {
		if f.got[e.ID] == all {
			out = append(out, e.ID)
			delete(f.got, e.ID)
		}
	}
	// A sink's notify.Permanent stays visible through the join.
	return out, errors.Join(errs...)
}

// ConfirmAll is a Publisher that confirms every event at once and sends it
// nowhere: the sink of the status events when nothing is configured to
// receive them (the table transport without a status webhook), so that
// their rows are marked processed, count no more in the backlog, and are
// pruned by retention like any other.
type ConfirmAll struct{}

// Publish returns every event's id.
func (ConfirmAll) Publish(_ context.Context, events []notify.Event) ([]int64, error) {
	ids := make([]int64, len(events))
	for i, e := range events {
		ids[i] = e.ID
	}
	return ids, nil
}
