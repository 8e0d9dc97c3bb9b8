package notify

import "time"

// Attempt is one delivery attempt of a notification, as delivery_attempts
// records it.
type Attempt struct {
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
	// Error is the failure's reason; empty when sent.
	Error string
}

// The outcomes of an attempt.
const (
	AttemptSent  = "sent"
	AttemptRetry = "retry"
	AttemptDead  = "dead"
	// AttemptDeferred: the mail server itself failed (unreachable, TLS,
	// authentication): the attempt was not spent.
	AttemptDeferred = "deferred"
)
