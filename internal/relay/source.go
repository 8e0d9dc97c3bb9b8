package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// Outbox is the outbox as the relay sees it: two primitives, a lease and
// a settlement, each a short transaction of its own. The stores implement
// it; the relay's protocol around them (Batch) is written once, here.
type Outbox interface {
	// LeaseRelay leases up to limit due unprocessed outbox rows that no
	// other lease holds and whose event type is one of types (nil: every
	// type; never an empty list) to token for lease, in one short
	// transaction it commits, and returns them highest priority first,
	// then in id order. A row whose lease runs out unsettled is due again.
	LeaseRelay(ctx context.Context, limit int, types []string, token string, lease time.Duration) ([]notify.Event, error)
	// SettleRelay marks processed the rows of mark (any lease's confirm
	// counts: the broker has the event) and ends token's lease on the
	// rows of release, so that they are due again at once, in one
	// transaction. Running it twice changes nothing more.
	SettleRelay(ctx context.Context, mark, release []notify.OutboxKey, token string) error
}

// markTimeout bounds recording an effect that already happened (events the
// broker confirmed): the recording runs even when the caller's context has
// ended meanwhile, since skipping it would publish them again.
const markTimeout = 10 * time.Second

// relayLease is how long rows stay leased to a batch whose context has no
// deadline; with one, the lease runs until it, plus markTimeout.
const relayLease = time.Minute

// Batch relays one batch of o's rows: it leases up to limit rows of types
// (nil: every type; an empty non-nil list: none, and publish is not
// called), calls publish with them, then marks processed exactly the
// leased rows whose ids publish returned, even when publish also returned
// an error (which Batch then returns, wrapped), and ends the lease of the
// others. It returns the number of rows leased; 0 means there was nothing
// to relay and publish was not called.
//
// No transaction, connection or lock is held while publish runs (a hung
// broker must not hold SQLite's single writer, nor a row lock): the lease
// is its own short transaction, lasting until ctx's deadline plus a margin
// to record the confirms (relayLease when ctx has none), and the
// settlement a second one, run even when ctx has ended meanwhile (the
// broker has the events) and tried again while the store is out of reach
// (notify.ErrUnavailable), until the margin runs out. A row whose lease
// runs out unsettled (the relay crashed or hung) is leased again:
// published twice perhaps, lost never; the worker's dedup absorbs the
// copy. Two relays never hold the same row at once. Rows of other types
// are left alone: another relay, configured with them, hands those on
// (exactly one relay per row).
func Batch(ctx context.Context, o Outbox, limit int, types []string, publish func(context.Context, []notify.Event) ([]int64, error)) (int, error) {
	if limit < 1 {
		return 0, fmt.Errorf("relay batch: limit must be at least 1, got %d", limit)
	}
	if types != nil && len(types) == 0 {
		return 0, nil
	}
	lease := relayLease
	if deadline, ok := ctx.Deadline(); ok {
		lease = time.Until(deadline) + markTimeout
	}
	token := relayToken()
	events, err := o.LeaseRelay(ctx, limit, types, token, lease)
	if err != nil {
		// Rows leased before a failure come back when their lease ends.
		return 0, fmt.Errorf("relay batch: lease: %w", err)
	}
	if len(events) == 0 {
		return 0, nil
	}
	confirmed, pubErr := publish(ctx, events)
	// Only rows of this batch may be marked: an id from elsewhere could
	// belong to another relay's batch. Each is named with the occurred_at
	// its lease returned.
	var mark, release []notify.OutboxKey
	for _, e := range events {
		k := notify.OutboxKey{ID: e.ID, OccurredAt: e.OccurredAt}
		if slices.Contains(confirmed, e.ID) {
			mark = append(mark, k)
		} else {
			release = append(release, k)
		}
	}
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	if err := settle(mctx, o, mark, release, token); err != nil {
		return len(events), errors.Join(fmt.Errorf("relay batch: settle: %w", err), pubErr)
	}
	if pubErr != nil {
		return len(events), fmt.Errorf("relay batch: publish: %w", pubErr)
	}
	return len(events), nil
}

// settle settles a batch and tries again while the store is out of reach,
// until ctx ends (markTimeout, which the rows' lease covers): a connection
// dropped or a failover between the publish and the mark would otherwise
// leave the confirmed rows leased for the rest of the lease and then have
// them published again.
func settle(ctx context.Context, o Outbox, mark, release []notify.OutboxKey, token string) error {
	wait := 50 * time.Millisecond
	for {
		err := o.SettleRelay(ctx, mark, release, token)
		if err == nil || !errors.Is(err, notify.ErrUnavailable) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// relayToken names one relay batch in the rows' locked_by.
func relayToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "relay-" + hex.EncodeToString(b)
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
