package relay

import (
	"context"

	"github.com/heraldhq/herald/internal/notify"
)

// Source is the outbox as the relay sees it. The stores implement it.
type Source interface {
	// RelayBatch claims up to limit unprocessed outbox rows in id order
	// that no other relay holds and whose event type is one of types (nil:
	// every type; an empty non-nil list: none, publish is not called),
	// calls publish with them, then marks
	// processed (processed_at) exactly the claimed rows whose ids publish
	// returned, even when publish also returned an error (which RelayBatch
	// then returns, wrapped). It returns the number of rows claimed; 0
	// means the outbox had nothing to relay and publish was not called.
	//
	// No transaction, connection or lock is held while publish runs (a
	// hung broker must not hold SQLite's single writer, nor a row lock):
	// the claim is its own short transaction that leases the rows
	// (locked_by, locked_until) until ctx's deadline plus a margin to
	// record the confirms (a default lease when ctx has none), and the
	// marking is a second one, run even when ctx has ended meanwhile
	// (the broker has the events). The marking also ends the lease of the
	// claimed rows publish did not confirm, so they are due again at once.
	// A row whose lease runs out unmarked (the relay crashed or hung) is
	// claimed again: published twice perhaps, lost never; the worker's
	// dedup absorbs the copy. Two relays never hold the same row at once,
	// on either engine. Rows of other types are left alone: another relay,
	// configured with them, hands those on (exactly one relay per row).
	RelayBatch(ctx context.Context, limit int, types []string, publish func(context.Context, []notify.Event) ([]int64, error)) (int, error)
}

// Publisher hands events to the broker.
type Publisher interface {
	// Publish publishes every event (persistent, mandatory) and waits for
	// the broker's confirms of the whole batch. It returns the ids of the
	// events the broker confirmed; an event that was returned as
	// unroutable, nacked or not confirmed in time is left out, and err
	// says why. An error marked notify.Permanent says that retrying cannot
	// help (the broker refuses the topology the publisher declares: 406
	// PRECONDITION_FAILED): the relay stops on it. Outages (dial refused,
	// connection lost, confirm timeout) must not be marked.
	Publish(ctx context.Context, events []notify.Event) (confirmed []int64, err error)
}

// Waker tells the relay that new outbox rows were committed.
type Waker interface {
	// Subscribe returns a channel that receives a value (coalesced: at most
	// one pending) whenever new outbox rows may have been committed. The
	// channel is closed when ctx ends.
	Subscribe(ctx context.Context) <-chan struct{}
}
