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

// Bookkeeper keeps the effect's bookkeeping: a claim before each send and a
// record after it, so that no database connection or lock is held across a
// send. The worker groups the records and the claims of concurrent
// deliveries into one call, one short transaction. The stores implement it.
type Bookkeeper interface {
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

// Sender delivers one notification of its channel. A notify.Permanent
// error means retrying cannot help; a notify.SenderDown error (the
// provider unreachable, TLS, authentication) means the provider, not the
// message, failed; a notify.Throttled error means the provider asks to
// slow down. Neither of the last two spends an attempt (SenderDown does
// with Config.OutageSpendsAttempts); both pause the channel's sends, or
// only the sends to one destination when the error is scoped with
// notify.ForDestination. Any other error is this message's attempt.
type Sender interface {
	Send(ctx context.Context, m notify.Outgoing) error
}

// Prober is implemented by a Sender that can check its provider without
// sending. While the provider is down the worker probes it before its one
// trial send; a sender without Probe goes straight to the trial.
type Prober interface {
	// Probe returns nil when the provider accepts sends again.
	Probe(ctx context.Context) error
}

// Destinations is implemented by a Sender whose channel has several
// providers, one per destination (a webhook endpoint): it names the
// destination key of a message before it is sent, the key its errors are
// scoped to with notify.ForDestination. A delivery to a destination whose
// gate is closed is handed back without a send; other destinations go on.
// A sender without it (email, Telegram) has one provider: its gate is the
// channel's.
type Destinations interface {
	Destination(m notify.Outgoing) string
}

// DestinationBook keeps the persisted record of destinations that are not
// up (notify.Destination), so that an outage outlives a worker's restart,
// every worker sees the same record, and operators can list and enable
// them. The stores implement it; the worker writes it when a gate closes
// or opens, off the delivery's path.
type DestinationBook interface {
	// DestinationFailing records key (of channel) as failing with reason
	// since at, keeping the earlier Since of a record that exists and
	// updating its reason; a disabled record stays disabled. It returns
	// the record as stored.
	DestinationFailing(ctx context.Context, channel, key, reason string, at time.Time) (notify.Destination, error)
	// DestinationUp removes key's failing record (a disabled one stays).
	DestinationUp(ctx context.Context, key string) error
	// DisableDestination marks key's record disabled with reason (a
	// compare-and-set on its being failing); false when it was not.
	DisableDestination(ctx context.Context, key, reason string) (bool, error)
	// DisabledDestinations lists the keys of the disabled destinations.
	DisabledDestinations(ctx context.Context) ([]string, error)
}
