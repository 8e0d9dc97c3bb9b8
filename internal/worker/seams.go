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
// record after it, each a short transaction of its own, so that no
// database connection or lock is held across a send. The worker groups the
// claims (and the records) of concurrent deliveries into one call. The
// stores implement it.
type Store interface {
	// ClaimDeliveries answers every request, in order, in one transaction
	// (see notify.ClaimStatus). A taken claim leases the message id
	// (processed_messages, processed_at NULL) and the notification until
	// now+lease, and starts a delivery_attempts row; an expired lease is
	// taken over. Requests naming a message id or a notification already
	// named earlier in reqs are answered ClaimBusy.
	ClaimDeliveries(ctx context.Context, reqs []notify.ClaimRequest, lease time.Duration) ([]notify.Claim, error)
	// RecordDeliveries records the results of taken claims, in one
	// transaction, and reports in order which were applied: sent (message
	// done, notification sent, attempts+1), retry (attempts+1, last_error,
	// claim released), dead (notification failed, message done) or
	// deferred (claim released, no attempt spent). Each is a compare-and-
	// set on the claim: a result whose claim was taken over, or whose
	// notification was settled meanwhile, changes nothing and reports
	// false.
	RecordDeliveries(ctx context.Context, results []notify.DeliveryResult) ([]bool, error)
}

// Sender delivers one email. A notify.Permanent error (an SMTP 5xx to this
// message) means retrying cannot help; a notify.SenderDown error (the
// server unreachable, TLS, authentication) means the server, not the
// message, failed.
type Sender interface {
	Send(ctx context.Context, e notify.Email) error
}

// Prober is implemented by a Sender that can check its server without
// sending mail. While the server is down the worker probes it before
// resuming; a sender without Probe gets one real send as the probe.
type Prober interface {
	// Probe returns nil when the server accepts sessions again.
	Probe(ctx context.Context) error
}
