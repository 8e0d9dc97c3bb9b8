package worker

import (
	"context"
	"time"

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

// Store keeps the effect's bookkeeping: a claim before each send and a
// record after it, so that no database connection or lock is held across a
// send. The worker groups the records and the claims of concurrent
// deliveries into one call, one short transaction. The stores implement it.
type Store interface {
	// ClaimAndRecord records results, then answers claims, in one
	// transaction.
	//
	// Each result of a taken claim is applied as a compare-and-set on the
	// claim (a result whose claim was taken over, or whose notification was
	// settled meanwhile, changes nothing and is reported false): sent
	// (message done, notification sent, attempts+1), retry (attempts+1,
	// last_error, claim released), dead (notification failed, message done)
	// or deferred (claim released, no attempt spent).
	//
	// Each claim request is answered in order (see notify.ClaimStatus). A
	// taken claim leases the message id (processed_messages, processed_at
	// NULL) and the notification until now+lease, and starts a
	// delivery_attempts row; an expired lease is taken over. A request
	// naming a message id or a notification named earlier in reqs is
	// answered ClaimBusy.
	ClaimAndRecord(ctx context.Context, reqs []notify.ClaimRequest, lease time.Duration, results []notify.DeliveryResult) ([]notify.Claim, []bool, error)
}

// Sender delivers one email. A notify.Permanent error (an SMTP 5xx to this
// message) means retrying cannot help; a notify.SenderDown error (the
// server unreachable, TLS, authentication) means the server, not the
// message, failed; a notify.Throttled error means the provider asks to slow
// down. Neither of the last two spends an attempt (SenderDown does with
// Config.OutageSpendsAttempts); both pause sends. Any other error is this
// message's attempt.
type Sender interface {
	Send(ctx context.Context, e notify.Email) error
}

// Prober is implemented by a Sender that can check its server without
// sending mail. While the server is down the worker probes it before its
// one trial send; a sender without Probe goes straight to the trial.
type Prober interface {
	// Probe returns nil when the server accepts sessions again.
	Probe(ctx context.Context) error
}
