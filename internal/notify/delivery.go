package notify

import "context"

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
	// Release hands the message back unchanged, to be redelivered without
	// counting a retry (used when the store is unreachable).
	Release(ctx context.Context) error
}

// Handler handles one delivery and settles it. A transport calls it from
// up to its prefetch goroutines at once; a delivery it returns without
// settling stays with the transport and is redelivered.
type Handler func(ctx context.Context, d Delivery)
