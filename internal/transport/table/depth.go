package table

import (
	"context"

	"github.com/heraldhq/herald/internal/notify"
)

// OutboxStats reports the outbox's backlog. The stores implement it.
type OutboxStats interface {
	OutboxStats(ctx context.Context) (notify.OutboxStats, error)
}

// Depth reports the outbox table as the queue it is, for the console and
// GET /status: its notification events not yet finished (due, leased to a
// worker, or waiting for a retry's due time; the store does not tell these
// apart here). Status events are the status relay's, not a worker's, and
// are left out. Consumers and InFlight are nil: the workers claim rows,
// they do not attach; their reports say which run.
type Depth struct {
	// Stats is the store. Required.
	Stats OutboxStats
}

// QueueDepths reads the outbox's backlog.
func (d Depth) QueueDepths(ctx context.Context) ([]notify.QueueDepth, error) {
	st, err := d.Stats.OutboxStats(ctx)
	if err != nil {
		return nil, err
	}
	return []notify.QueueDepth{{Name: "outbox", Role: notify.QueueSend, Ready: st.Unprocessed - st.UnprocessedStatus}}, nil
}
