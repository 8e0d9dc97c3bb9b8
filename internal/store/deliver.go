package store

import (
	"context"
	"fmt"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// Deliverer is what Deliver needs of a store: the worker's claims and
// records.
type Deliverer interface {
	ClaimDeliveries(ctx context.Context, reqs []notify.ClaimRequest, lease time.Duration) ([]notify.Claim, error)
	RecordDeliveries(ctx context.Context, results []notify.DeliveryResult) ([]bool, error)
}

// recordTimeout bounds recording a send that happened, even when ctx ended.
const recordTimeout = 10 * time.Second

// deliverLease is the lease Deliver takes: its send has no bound of its own.
const deliverLease = 5 * time.Minute

// Deliver runs one whole delivery without batching: it claims msgID for
// notificationID, calls send with no transaction open, and records the
// outcome (send's nil: sent; a notify.SenderDown error: deferred, no attempt
// spent; a notify.Permanent error: dead; any other: retry). It returns
// OutcomeSent, OutcomeDuplicate (nothing sent), a permanent
// notify.ErrNotFound for a missing notification, an error when another
// claim holds the notification, or send's error as is, after recording it.
// The worker does the same with its own retry limit and groups many
// deliveries per transaction; Deliver serves tests and benchmarks.
func Deliver(ctx context.Context, s Deliverer, msgID, notificationID int64, send func(context.Context) error) (notify.Outcome, error) {
	return DeliverCopy(ctx, s, notify.ClaimRequest{MessageID: msgID, NotificationID: notificationID}, send)
}

// DeliverCopy is Deliver for the delivery req names, with its retry count:
// a retry's copy (a stale copy, below the count the store expects, is a
// duplicate).
func DeliverCopy(ctx context.Context, s Deliverer, req notify.ClaimRequest, send func(context.Context) error) (notify.Outcome, error) {
	msgID, notificationID := req.MessageID, req.NotificationID
	cs, err := s.ClaimDeliveries(ctx, []notify.ClaimRequest{req}, deliverLease)
	if err != nil {
		return "", fmt.Errorf("deliver message %d: %w", msgID, err)
	}
	c := cs[0]
	switch c.Status {
	case notify.ClaimDuplicate:
		return notify.OutcomeDuplicate, nil
	case notify.ClaimMissing:
		return "", notify.Permanent(fmt.Errorf("deliver message %d: notification %d: %w", msgID, notificationID, notify.ErrNotFound))
	case notify.ClaimBusy:
		return "", fmt.Errorf("deliver message %d: notification %d is claimed by another delivery", msgID, notificationID)
	}
	sendErr := send(ctx)
	res := notify.DeliveryResult{Claim: c, Outcome: notify.AttemptSent}
	if sendErr != nil {
		res.Error = sendErr.Error()
		switch {
		case notify.IsSenderDown(sendErr):
			res.Outcome = notify.AttemptDeferred
		case notify.IsPermanent(sendErr):
			res.Outcome = notify.AttemptDead
		default:
			res.Outcome = notify.AttemptRetry
		}
	}
	// The send happened: record it even if ctx ended meanwhile.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if _, err := s.RecordDeliveries(rctx, []notify.DeliveryResult{res}); err != nil {
		return "", fmt.Errorf("deliver message %d: %w", msgID, err)
	}
	if sendErr != nil {
		return "", sendErr
	}
	return notify.OutcomeSent, nil
}
