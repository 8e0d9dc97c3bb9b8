package notify

import (
	"fmt"
	"time"
)

// ClaimRequest asks for the claim a worker takes before it sends one
// message: a lease on the message id and on the notification it delivers.
type ClaimRequest struct {
	MessageID      int64
	NotificationID int64
	// RetryCount is the delivered message's retry count (Message.RetryCount,
	// the x-retry-count of a broker's copy). A message and its retry copies
	// share one id; once a retry of the delivery with count k was recorded,
	// only a copy with count k+1 or more may be claimed: one with a lower
	// count is a stale copy of an attempt already spent (an original a
	// broker redelivered after the retry's copy was published) and is
	// answered ClaimDuplicate.
	RetryCount int
}

// ClaimStatus is what became of one ClaimRequest.
type ClaimStatus string

// The answers to a claim request.
const (
	// ClaimTaken: the message and its notification are leased to the
	// caller, who sends and then records the result.
	ClaimTaken ClaimStatus = "claimed"
	// ClaimDuplicate: the message was applied already, or its notification
	// is no longer pending (sent, or dead-lettered): acknowledge it without
	// sending. The message id is recorded as processed. A stale copy (see
	// ClaimRequest.RetryCount) is answered ClaimDuplicate too, but its
	// message id stays open for the copy that carries the next retry.
	ClaimDuplicate ClaimStatus = "duplicate"
	// ClaimBusy: another delivery of the notification holds a live lease
	// (a copy of the message, or another message for the same
	// notification): hand the message back after a pause.
	ClaimBusy ClaimStatus = "busy"
	// ClaimMissing: no such notification. The message can never be
	// applied; its id is recorded as processed.
	ClaimMissing ClaimStatus = "missing"
)

// Claim is the answer to one ClaimRequest.
type Claim struct {
	MessageID      int64
	NotificationID int64
	Status         ClaimStatus
	// AttemptID identifies a taken claim: it is the id of the
	// delivery_attempts row the claim started, and the token every record
	// of the claim must name. Zero unless Status is ClaimTaken.
	AttemptID int64
	// Attempt is the number of that attempt (see Attempt.Attempt).
	Attempt int
	// RetryCount is the request's RetryCount, echoed: a retry recorded for
	// the claim marks the copies with this count or less as spent.
	RetryCount int
	// Until is when the lease runs out; after it another delivery of the
	// notification may take the claim over (its holder is presumed dead).
	Until time.Time
}

// DeliveryResult is how the send of a taken claim ended, as the worker
// records it.
type DeliveryResult struct {
	Claim Claim
	// Outcome is AttemptSent, AttemptRetry, AttemptDead or AttemptDeferred.
	Outcome string
	// Error is the failure's reason; empty when sent.
	Error string
	// Deferral is the kind of an AttemptDeferred (DeferDown, ...): when the
	// notification's previous attempt row is a deferral of the same kind,
	// the store folds this one into it (Attempt.Repeats) instead of keeping
	// a row per probe. Empty for other outcomes (and a deferral without a
	// kind is never folded).
	Deferral string
	// RetryIn, for AttemptRetry, is how long until the retry is due (the
	// schedule's delay for it): the store records the due time, so that the
	// reconciler does not take a notification waiting in a retry queue for
	// a lost one.
	RetryIn time.Duration
}

// CheckBookkeeping checks the arguments of a store's ClaimAndRecord, the
// same for every store: a positive lease when there are claims to take,
// and only known outcomes among the results.
func CheckBookkeeping(reqs []ClaimRequest, lease time.Duration, results []DeliveryResult) error {
	if len(reqs) > 0 && lease <= 0 {
		return fmt.Errorf("claim deliveries: lease must be positive, got %s", lease)
	}
	for _, r := range results {
		switch r.Outcome {
		case AttemptSent, AttemptRetry, AttemptDead, AttemptDeferred:
		default:
			return fmt.Errorf("record deliveries: unknown outcome %q", r.Outcome)
		}
	}
	return nil
}
