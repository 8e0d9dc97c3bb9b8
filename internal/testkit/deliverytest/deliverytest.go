// Package deliverytest runs deliveries against a store's bookkeeping
// (worker.Bookkeeper's ClaimAndRecord) one at a time, for tests and the
// conformance suite: the worker groups many deliveries per transaction and
// has its own retry limit; these helpers claim, send and record one.
package deliverytest

import (
	"context"
	"fmt"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// Bookkeeper is what the helpers need of a store: the worker's grouped
// claim and record (worker.Bookkeeper).
type Bookkeeper interface {
	ClaimAndRecord(ctx context.Context, reqs []notify.ClaimRequest, lease time.Duration, results []notify.DeliveryResult) ([]notify.Claim, []bool, error)
}

// Claim claims every request alone in its transaction (ClaimAndRecord
// with no results) and returns the answers in request order.
func Claim(ctx context.Context, s Bookkeeper, reqs []notify.ClaimRequest, lease time.Duration) ([]notify.Claim, error) {
	cs, _, err := s.ClaimAndRecord(ctx, reqs, lease, nil)
	return cs, err
}

// Record records the results of taken claims alone in their transaction
// (ClaimAndRecord with no claims) and reports, in order, which were
// applied.
func Record(ctx context.Context, s Bookkeeper, results []notify.DeliveryResult) ([]bool, error) {
	_, ok, err := s.ClaimAndRecord(ctx, nil, 0, results)
	return ok, err
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
func Deliver(ctx context.Context, s Bookkeeper, msgID, notificationID int64, send func(context.Context) error) (notify.Outcome, error) {
	return DeliverCopy(ctx, s, notify.ClaimRequest{MessageID: msgID, NotificationID: notificationID}, send)
}

// DeliverCopy is Deliver for the delivery req names, with its retry count:
// a retry's copy (a stale copy, below the count the store expects, is a
// duplicate).
func DeliverCopy(ctx context.Context, s Bookkeeper, req notify.ClaimRequest, send func(context.Context) error) (notify.Outcome, error) {
	msgID, notificationID := req.MessageID, req.NotificationID
	cs, err := Claim(ctx, s, []notify.ClaimRequest{req}, deliverLease)
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
	if _, err := Record(rctx, s, []notify.DeliveryResult{res}); err != nil {
		return "", fmt.Errorf("deliver message %d: %w", msgID, err)
	}
	if sendErr != nil {
		return "", sendErr
	}
	return notify.OutcomeSent, nil
}
