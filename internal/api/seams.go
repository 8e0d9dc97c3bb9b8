package api

import (
	"context"

	"github.com/heraldhq/herald/internal/notify"
)

// Store keeps notifications. The stores implement it.
type Store interface {
	// Create writes the notification and its notification.requested outbox
	// event in one transaction (see notify.NewNotification for the
	// idempotency key and the debug fault). Errors: notify.ErrConflict,
	// notify.ErrInjectedFault, or a store failure.
	Create(ctx context.Context, n notify.NewNotification) (notify.Created, error)
	// Get returns one notification or notify.ErrNotFound.
	Get(ctx context.Context, id int64) (notify.Notification, error)
}

// Pinger is one dependency that readiness checks.
type Pinger interface {
	Ping(ctx context.Context) error
}
