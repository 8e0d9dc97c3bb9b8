package api

import (
	"context"

	"github.com/heraldhq/herald/internal/notify"
)

// Notifications keeps notifications. The stores implement it.
type Notifications interface {
	// Create writes the notification and its notification.requested outbox
	// event in one transaction (see notify.NewNotification for the
	// idempotency key and the debug fault). Errors: notify.ErrConflict,
	// notify.ErrInjectedFault, or a store failure.
	Create(ctx context.Context, n notify.NewNotification) (notify.Created, error)
	// CreateBatch writes each of nns as Create would, in their order, and
	// answers one result per request in the same order: created, replayed
	// or notify.ErrConflict. The batch is one transaction where the store
	// has transactions (PostgreSQL, SQLite): any other failure, the debug
	// fault of any request included, writes none of them and fails the
	// whole call. A store without (MongoDB) writes each create atomically
	// and says what a failure leaves.
	CreateBatch(ctx context.Context, nns []notify.NewNotification) ([]notify.BatchResult, error)
	// Get returns one notification or notify.ErrNotFound.
	Get(ctx context.Context, id int64) (notify.Notification, error)
	// List returns a page of the notifications f selects, newest first,
	// without their bodies, and where the next page starts.
	List(ctx context.Context, f notify.ListFilter) (notify.ListPage, error)
	// Attempts returns every delivery attempt of a notification, in the
	// order they were made, or notify.ErrNotFound.
	Attempts(ctx context.Context, id int64) ([]notify.Attempt, error)
	// AttemptPage returns the page of a notification's attempts f
	// selects, or notify.ErrNotFound.
	AttemptPage(ctx context.Context, id int64, f notify.AttemptFilter) (notify.AttemptPage, error)
	// Cancel cancels a pending (or scheduled) notification that no send
	// holds, in one transaction with its notification.canceled status
	// event, and returns it; no send of it starts afterwards. A canceled
	// one is returned as it is (idempotent). Errors: notify.ErrNotFound,
	// notify.ErrSendInProgress (a worker holds its claim),
	// notify.ErrNotCancelable (sent, failed or expired; the notification is
	// returned too), or a store failure.
	Cancel(ctx context.Context, id int64) (notify.Notification, error)
}

// Pinger is one dependency that readiness checks.
type Pinger interface {
	Ping(ctx context.Context) error
}
