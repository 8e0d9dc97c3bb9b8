// Package store declares the contract both store engines implement,
// store/postgres and store/sqlite, once. Each component declares the small
// seam it uses (api.Store, relay.Outbox, worker.Store, ...); Store is their
// union plus what the commands use directly, so the builder in cmd/herald
// can hold either engine as one value, and the conformance suite
// (store/storetest) runs the same subtests on both.
//
// Only cmd/herald and tests import this package: a component that imported
// it would depend on every other component's seam.
package store

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

// Store is the one contract both engines implement: every component seam a
// store serves, each declared by the component that uses it, and the
// migrations.
type Store interface {
	api.Store
	api.Pinger
	relay.Outbox
	relay.Waker
	worker.Store
	worker.DestinationBook
	api.Destinations
	api.Recipients
	api.Templates
	api.Preferences
	table.Queue
	table.Waker
	deadletter.Store
	retention.Pruner
	monitor.Stats
	api.BacklogStats
	reconcile.Store
	console.Stats
	deployment.Store
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
