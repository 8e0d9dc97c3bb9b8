package storetest

import (
	"context"
	"time"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/console"
	"github.com/heraldhq/herald/internal/deadletter"
	"github.com/heraldhq/herald/internal/deployment"
	"github.com/heraldhq/herald/internal/monitor"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/reconcile"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/retention"
	"github.com/heraldhq/herald/internal/store/migrate"
	"github.com/heraldhq/herald/internal/transport/table"
	"github.com/heraldhq/herald/internal/worker"
)

// Store is the contract every store engine implements and this suite
// tests: every component seam a store serves, each declared by the
// component that uses it, and what the commands use directly. The
// composition root, cmd/herald, holds an engine as its own union of the
// same seams (its store type; a test there keeps the two equal), so that
// no production package sits above the components it unions.
type Store interface {
	api.Notifications
	api.Pinger
	relay.Outbox
	relay.Waker
	worker.Bookkeeper
	worker.DestinationBook
	api.Destinations
	api.Recipients
	api.Templates
	api.Preferences
	table.Queue
	table.Waker
	deadletter.Letters
	retention.Pruner
	monitor.Stats
	api.BacklogStats
	reconcile.Reannouncer
	console.Stats
	deployment.Records
	deployment.Beater

	// Prune is retention.Pruner's PruneOlderThan with the cut-off given as
	// an instant, which the caller must have read from the clock that
	// wrote the rows (the conformance suite does, to place rows on either
	// side of it).
	Prune(ctx context.Context, before time.Time, batch int) (notify.PruneResult, error)

	// EraseRecipient erases a user's personal data: their recipient
	// record, and the address, content and errors of their notifications,
	// outbox events and delivery attempts (herald recipients erase). The
	// user id, statuses, times and counts stay.
	EraseRecipient(ctx context.Context, userID string) (notify.Erasure, error)

	// Migrate applies the embedded migrations not yet applied; running it
	// again changes nothing. Only the commands call it.
	Migrate(ctx context.Context) error
	// MigrationStatus reports each migration as applied or pending (see
	// migrate.Check); it changes nothing.
	MigrationStatus(ctx context.Context) ([]migrate.State, error)
}
