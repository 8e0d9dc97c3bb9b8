package notify

import "time"

// Attempt is one delivery attempt of a notification, as delivery_attempts
// records it.
type Attempt struct {
	// ID is the attempt row's id, which orders a notification's attempts
	// (a listing resumes after it).
	ID int64
	// Attempt numbers the attempts of a notification from 1.
	Attempt int
	// MessageID is the outbox id of the message the attempt delivered.
	MessageID int64
	StartedAt time.Time
	// FinishedAt is nil while the send is in flight (or when the worker
	// died during it).
	FinishedAt *time.Time
	// Outcome is AttemptSent, AttemptRetry, AttemptDead or AttemptDeferred;
	// empty while the send is in flight.
	Outcome string
	// Error is the failure's reason; empty when sent. For a deferral
	// that repeated, the latest one's.
	Error string
	// Deferral is the kind of a deferred attempt (DeferDown,
	// DeferThrottled, DeferLimit, DeferStopped); empty for other
	// outcomes, and for deferrals recorded before kinds were.
	Deferral string
	// Repeats counts the deferrals of the same kind that followed this one
	// with no other attempt between them, folded into this row (one row
	// per outage, not one per probe); 0 when it happened once.
	Repeats int
	// LastAt is when the latest of those repeats finished; nil when
	// Repeats is 0.
	LastAt *time.Time
}

// The outcomes of an attempt.
const (
	AttemptSent  = "sent"
	AttemptRetry = "retry"
	AttemptDead  = "dead"
	// AttemptDeferred: the provider or the destination was down or
	// throttling before the message was handed over, or a limit of the
	// worker's cut the send short: the attempt was not spent.
	AttemptDeferred = "deferred"
)

// The kinds of a deferral (DeliveryResult.Deferral, Attempt.Deferral). A
// deferral of the same kind as the notification's previous attempt row is
// folded into that row (Attempt.Repeats) instead of adding one.
const (
	// DeferDown: the provider or the destination was unreachable (or
	// refused TLS, authentication, the greeting) before the hand-over.
	DeferDown = "down"
	// DeferThrottled: the provider asked to slow down (421, 429,
	// Retry-After).
	DeferThrottled = "throttled"
	// DeferLimit: a limit of the worker's own (the claim's lease left no
	// time for the send) cut it short.
	DeferLimit = "limit"
	// DeferStopped: the worker stopped during the send.
	DeferStopped = "stopped"
)

// AttemptFilter selects a page of a notification's attempts, in attempt
// order (oldest first) or, with Newest, newest first.
type AttemptFilter struct {
	// Limit is the most a page holds; it must be at least 1.
	Limit int
	// After, when not 0, resumes a listing: only attempts after the one
	// with this ID in the order (later ones; with Newest, earlier) are
	// listed.
	After int64
	// Newest lists the latest attempts first.
	Newest bool
}

// AttemptPage is one page of a notification's attempts.
type AttemptPage struct {
	Items []Attempt
	// Next is the ID of the attempt to resume after (AttemptFilter.After),
	// 0 when the listing is done.
	Next int64
}

// PageAttempts cuts the page f selects out of as, every attempt of a
// notification in attempt order: for the stores that read a
// notification's attempts whole (they are few: one row per outage, not
// per probe).
func PageAttempts(as []Attempt, f AttemptFilter) AttemptPage {
	out := make([]Attempt, 0, min(len(as), f.Limit+1))
	for i := range as {
		a := as[i]
		if f.Newest {
			a = as[len(as)-1-i]
		}
		if f.After != 0 && (!f.Newest && a.ID <= f.After || f.Newest && a.ID >= f.After) {
			continue
		}
		out = append(out, a)
		if len(out) > f.Limit {
			break
		}
	}
	return CutAttempts(out, f.Limit)
}

// CutAttempts makes a page of up to limit+1 attempts read in the page's
// order: the extra one, when there, says that the listing goes on.
func CutAttempts(as []Attempt, limit int) AttemptPage {
	if len(as) <= limit {
		return AttemptPage{Items: as}
	}
	return AttemptPage{Items: as[:limit], Next: as[limit-1].ID}
}
