package worker

import "github.com/heraldhq/herald/internal/notify"

// sendFacts is what decides a send's outcome: its error and the state of
// the delivery and of the worker when it returned.
type sendFacts struct {
	// err is the sender's answer (nil: sent).
	err error
	// retries is the message's retry count before this attempt.
	retries int
	// maxRetries is Config.MaxRetries.
	maxRetries int
	// stopping: the worker's context ended during the send.
	stopping bool
	// ownLimit: the send ran out of the time this worker's own lease left
	// it, a limit of the worker's and no fault of the message.
	ownLimit bool
	// outageSpends is Config.OutageSpendsAttempts.
	outageSpends bool
}

// classify names the outcome of a send by the phase its failure happened
// in, as the sender marked it: sent; deferred (the provider or the
// destination was down or throttling before the message was handed over,
// or a limit of this worker's cut the send short: no attempt spent); dead
// (permanent, or the last retry spent); or a retry of the message.
func classify(f sendFacts) string {
	if f.err == nil {
		return notify.AttemptSent
	}
	_, throttled := notify.IsThrottled(f.err)
	switch {
	case throttled, notify.IsSenderDown(f.err) && !f.outageSpends, f.stopping, f.ownLimit:
		return notify.AttemptDeferred
	case notify.IsPermanent(f.err), f.retries >= f.maxRetries:
		return notify.AttemptDead
	default:
		return notify.AttemptRetry
	}
}

// deferral names the kind of a deferred send (see classify), so that the
// store can fold a run of deferrals of one kind into one attempt row: the
// worker stopping, a limit of its own, the provider throttling, or the
// provider (or the destination) down.
func deferral(f sendFacts) string {
	_, throttled := notify.IsThrottled(f.err)
	switch {
	case f.stopping:
		return notify.DeferStopped
	case f.ownLimit:
		return notify.DeferLimit
	case throttled:
		return notify.DeferThrottled
	default:
		return notify.DeferDown
	}
}
