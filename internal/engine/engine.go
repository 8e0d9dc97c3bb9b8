// Package engine says what a store engine serves: the union of every
// component seam a store implements, each declared by the component that
// uses it, and what the commands use directly. It sits above the
// components and below the composition root: cmd/herald holds an engine
// as this union, and the store conformance suite (storetest) tests it on
// every engine, so a seam added here is one both follow.
package engine

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

// Store is a store engine (PostgreSQL, SQLite or MongoDB): every seam
// the components declare for their store, and the methods only the
// commands call.
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
