package relay

import (
	"context"

	"github.com/heraldhq/herald/internal/notify"
)

// Source is the outbox as the relay sees it. The stores implement it.
type Source interface {
	// RelayBatch claims up to limit unprocessed outbox rows in id order,
	// skipping rows that another relay holds (FOR UPDATE SKIP LOCKED on
	// PostgreSQL), and calls publish with them. In the same transaction it
	// sets processed_at on exactly the rows whose ids publish returned, then
	// commits, even when publish also returned an error (which RelayBatch
	// then returns, wrapped). It returns the number of rows claimed; 0 means
	// the outbox had nothing to relay and publish was not called.
	RelayBatch(ctx context.Context, limit int, publish func(context.Context, []notify.Event) ([]int64, error)) (int, error)
}

// Publisher hands events to the broker.
type Publisher interface {
	// Publish publishes every event (persistent, mandatory) and waits for
	// the broker's confirms of the whole batch. It returns the ids of the
	// events the broker confirmed; an event that was returned as
	// unroutable, nacked or not confirmed in time is left out, and err
	// says why.
	Publish(ctx context.Context, events []notify.Event) (confirmed []int64, err error)
}

// Waker tells the relay that new outbox rows were committed.
type Waker interface {
	// Subscribe returns a channel that receives a value (coalesced: at most
	// one pending) whenever new outbox rows may have been committed. The
	// channel is closed when ctx ends.
	Subscribe(ctx context.Context) <-chan struct{}
}
