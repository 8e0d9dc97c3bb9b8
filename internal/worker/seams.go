package worker

import (
	"context"

	"github.com/heraldhq/herald/internal/notify"
)

// Source delivers messages to the worker: a broker queue or the outbox
// table. The transports implement it.
type Source interface {
	// Consume calls handle for each delivery, from up to the transport's
	// prefetch goroutines at once, until ctx ends; it reconnects after
	// outages on its own. It returns after every handle call it made has
	// returned. Deliveries not settled by then are handed back to be
	// redelivered.
	Consume(ctx context.Context, handle notify.Handler) error
}

// Store keeps the effect's bookkeeping. The stores implement it.
type Store interface {
	// Deliver applies a message at most once. In one transaction it inserts
	// msgID into processed_messages (ON CONFLICT DO NOTHING; a conflict
	// means OutcomeDuplicate and nothing else happens), locks the
	// notification (a missing one is notify.Permanent(notify.ErrNotFound)),
	// and unless it is still pending (then OutcomeDuplicate, with the
	// processed_messages row committed) calls send; if send fails the
	// transaction rolls back and its error is returned as is; otherwise the
	// notification becomes sent (attempts+1, sent_at) and the transaction
	// commits: OutcomeSent.
	Deliver(ctx context.Context, msgID, notificationID int64, send func(context.Context) error) (notify.Outcome, error)
	// RecordFailure records a failed attempt on a pending notification:
	// attempts+1 and last_error. With dead, also status failed and, in the
	// same transaction, msgID in processed_messages. A notification that is
	// missing or no longer pending is left alone.
	RecordFailure(ctx context.Context, msgID, notificationID int64, reason string, dead bool) error
}

// Sender delivers one email. A notify.Permanent error (an SMTP 5xx) means
// retrying cannot help.
type Sender interface {
	Send(ctx context.Context, e notify.Email) error
}
