package raw

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/heraldhq/herald/internal/bench"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
)

// The seams of the pipeline ceiling: the store methods one notification
// goes through on its way, each declared where herald's own component
// declares it (api.Notifications, worker.Bookkeeper, table.Queue, relay.Outbox). Both
// stores implement all of them.
type (
	// Creator is the API's create transaction.
	Creator interface {
		Create(ctx context.Context, nn notify.NewNotification) (notify.Created, error)
	}
	// Bookkeeper is the worker's claim and record.
	Bookkeeper interface {
		ClaimAndRecord(ctx context.Context, reqs []notify.ClaimRequest, lease time.Duration, results []notify.DeliveryResult) ([]notify.Claim, []bool, error)
	}
	// Queue is the outbox table as the table transport uses it.
	Queue interface {
		Claim(ctx context.Context, token string, limit int, lease time.Duration) ([]notify.Message, error)
		Finish(ctx context.Context, rows []notify.OutboxKey, token, reason string) error
	}
	// Relayer is the outbox as the relay uses it.
	Relayer = relay.Outbox
	// PipelineStore is a store that serves every step.
	PipelineStore interface {
		Creator
		Bookkeeper
		Queue
		Relayer
	}
)

// PipelineOptions shapes the raw pipeline ceiling.
type PipelineOptions struct {
	// N is the number of notifications taken through the pipeline.
	// Required.
	N int
	// Clients is the number of notifications in the pipeline at once.
	// Required.
	Clients int
	// Relay takes each notification through the relay's claim and mark
	// (a broker stack) instead of the table transport's claim and finish.
	// Default false (the outbox table is the queue).
	Relay bool
}

// pipelineLease is the lease of the ceiling's claims. It only sets
// timestamps: nothing in the ceiling waits for a lease to run out.
const pipelineLease = time.Minute

// maxEmptyClaims bounds the claims that find nothing in a row for one
// notification. One always finds a row (each client creates one before
// it claims one), so this only guards against a store that loses rows.
const maxEmptyClaims = 1000

// Pipeline measures the raw pipeline ceiling: notifications per second
// taken through the statements herald issues for one, with nothing else:
// no HTTP, no broker, no SMTP, no batching across notifications. Each of
// o.Clients clients in turn creates a notification (the store's create
// transaction), moves one due outbox row towards a worker (the table
// transport's claim of one row, or the relay's claim and mark of one row),
// takes the worker's claim, records it sent, and (table transport) finishes
// the row. o.Clients notifications more go first, not counted, to open the
// store's connections. s must be a scratch store: the ceiling leaves its
// rows behind.
func Pipeline(ctx context.Context, s PipelineStore, o PipelineOptions) (float64, error) {
	if o.N < 1 || o.Clients < 1 {
		return 0, fmt.Errorf("raw pipeline: n and clients must be at least 1, got %d and %d", o.N, o.Clients)
	}
	op := func(ctx context.Context, i int) error {
		if _, err := s.Create(ctx, newNotification(i)); err != nil {
			return fmt.Errorf("raw pipeline: %w", err)
		}
		var (
			msg    notify.Message
			finish func(context.Context) error
			err    error
		)
		if o.Relay {
			msg, err = relayOne(ctx, s)
		} else {
			msg, finish, err = claimOne(ctx, s)
		}
		if err != nil {
			return err
		}
		if err := deliverOne(ctx, s, msg); err != nil {
			return err
		}
		if finish != nil {
			return finish(ctx)
		}
		return nil
	}
	if _, err := bench.Ceiling(ctx, o.Clients, o.Clients, op); err != nil {
		return 0, err
	}
	return bench.Ceiling(ctx, o.N, o.Clients, func(ctx context.Context, i int) error { return op(ctx, o.Clients+i) })
}

// claimOne claims one due row as the table transport does, and returns it
// with the row's settlement (the transport's Ack).
func claimOne(ctx context.Context, q Queue) (notify.Message, func(context.Context) error, error) {
	for range maxEmptyClaims {
		token := Suffix()
		msgs, err := q.Claim(ctx, token, 1, pipelineLease)
		if err != nil {
			return notify.Message{}, nil, fmt.Errorf("raw pipeline: %w", err)
		}
		if len(msgs) == 0 {
			continue
		}
		m := msgs[0]
		return m, func(ctx context.Context) error {
			if err := q.Finish(ctx, []notify.OutboxKey{m.Key()}, token, ""); err != nil {
				return fmt.Errorf("raw pipeline: %w", err)
			}
			return nil
		}, nil
	}
	return notify.Message{}, nil, errors.New("raw pipeline: the outbox held no due row, claim after claim")
}

// requestedOnly is the relay's type selection for the rows a worker
// delivers: the status events the records write are not this pipeline's.
var requestedOnly = []string{notify.EventRequested}

// relayOne relays one row as the relay does, with a publish that confirms
// at once, and returns it as the broker would deliver it.
func relayOne(ctx context.Context, r Relayer) (notify.Message, error) {
	for range maxEmptyClaims {
		var msg notify.Message
		n, err := relay.Batch(ctx, r, 1, requestedOnly, func(_ context.Context, events []notify.Event) ([]int64, error) {
			e := events[0]
			msg = notify.Message{ID: e.ID, Type: e.Type, Payload: e.Payload, OccurredAt: e.OccurredAt}
			return []int64{e.ID}, nil
		})

		if err != nil {
			return notify.Message{}, fmt.Errorf("raw pipeline: %w", err)
		}
		if n > 0 {
			return msg, nil
		}
	}
	return notify.Message{}, errors.New("raw pipeline: the outbox held no row to relay, claim after claim")
}

// deliverOne takes the worker's claim on msg and records it sent, each in a
// transaction of its own, as a worker with one delivery in flight does.
func deliverOne(ctx context.Context, b Bookkeeper, msg notify.Message) error {
	_, nid, err := msg.Decode()
	if err != nil {
		return fmt.Errorf("raw pipeline: %w", err)
	}
	claims, _, err := b.ClaimAndRecord(ctx, []notify.ClaimRequest{{MessageID: msg.ID, NotificationID: nid}}, pipelineLease, nil)
	if err != nil {
		return fmt.Errorf("raw pipeline: claim: %w", err)
	}
	if len(claims) != 1 || claims[0].Status != notify.ClaimTaken {
		return fmt.Errorf("raw pipeline: claim of message %d: want it taken, got %+v", msg.ID, claims)
	}
	_, recorded, err := b.ClaimAndRecord(ctx, nil, pipelineLease, []notify.DeliveryResult{{Claim: claims[0], Outcome: notify.AttemptSent}})
	if err != nil {
		return fmt.Errorf("raw pipeline: record: %w", err)
	}
	if len(recorded) != 1 || !recorded[0] {
		return fmt.Errorf("raw pipeline: record of message %d: not recorded", msg.ID)
	}
	return nil
}
