package notify

import (
	"context"
	"time"
)

// Delivery is one message handed to a consumer by a transport, with the
// means to settle it. It is the seam every transport implements, kept with
// the domain types so that a transport needs nothing but this package.
// Exactly one of its settle methods is called, once.
type Delivery interface {
	// Message returns the delivered message.
	Message() Message
	// Ack settles the message as done.
	Ack(ctx context.Context) error
	// Retry schedules a copy with RetryCount+1 for redelivery after the
	// retry delay (and makes sure the copy is safe before settling this one).
	Retry(ctx context.Context, reason string) error
	// DeadLetter moves the message to the dead letters with its reason.
	DeadLetter(ctx context.Context, reason string) error
	// Release hands the message back unchanged (its retry count kept), to
	// be delivered again once after has passed (0: at once). It parks the
	// message: meanwhile it holds no consumer's place (a prefetch slot, a
	// row lease), and no broker delivery limit counts it. The worker uses it
	// for a delivery that cannot go now (its channel's or destination's
	// gate closed, its rate turn or share not come, the store unreachable):
	// after is then when it may go.
	Release(ctx context.Context, after time.Duration) error
}

// Handler handles one delivery and settles it. A transport calls it from
// up to its prefetch goroutines at once; a delivery it returns without
// settling stays with the transport and is redelivered.
type Handler func(ctx context.Context, d Delivery)
