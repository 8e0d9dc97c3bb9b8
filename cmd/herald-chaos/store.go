package main

import (
	"context"
	"time"
)

// chaosStores are the stores herald runs on in the harness, one row each:
// every hook the harness needs of a store, the hooks in the store's own
// file (store_NAME.go).
var chaosStores = []chaosStore{
	{name: "postgres", open: openPostgres},
	{
		name: "mongodb",
		open: openMongo,
		// FerretDB v1 reads the whole collection for each claim.
		drainTimeout: func(o options) time.Duration { return o.mongoDrainTimeout },
		leftOut: []leftOut{
			{faults: []string{"pg-*"}, why: "herald talks to FerretDB, not to PostgreSQL; ferretdb-restart takes the store away instead"},
			{faults: []string{"poison", "duplicates"}, why: "a notification document carries its events under the store's revision protocol: the harness does not forge one"},
			{faults: []string{"endpoint-blackhole", "channel-outage"}, why: "FerretDB v1 delivers under 2 notifications/s here: the others' rate would measure the store; and the attempts are counted from delivery_attempts"},
			{faults: []string{"pg-failover"}, why: "FerretDB is given one PostgreSQL server"},
		},
		own: []ownFault{
			{name: "ferretdb-restart", after: "webhook-fail", est: 3 * time.Second, do: (*harness).ferretRestart},
			{name: "kill-9 api", after: "ferretdb-restart", est: 2 * time.Second, do: (*harness).killAPI},
		},
	},
}

// chaosStore is one store as the harness knows it.
type chaosStore struct {
	name string
	// open starts what the store needs beyond the run's scratch
	// PostgreSQL database (h.directDB), points herald at it when it is
	// not that database (HERALD_DATABASE_URL in h.env), and returns what
	// the checks read of it.
	open func(ctx context.Context, h *harness) (storeView, error)
	// drainTimeout is the drain's bound on the store; nil for
	// --drain-timeout.
	drainTimeout func(o options) time.Duration
	// leftOut are the faults the store has no counterpart for.
	leftOut []leftOut
	// own are the faults of this store alone.
	own []ownFault
}

// storeView is what the drain and the checks read of the store herald
// runs on, reached straight.
type storeView interface {
	// drained reports whether no event is left to process and none of
	// the notifications ids and drops is pending, and what is left if not.
	drained(ctx context.Context, ids, drops []int64) (bool, string)
	// deadLetters returns the table transport's dead letters: the events
	// finished with a reason, unless their notification was sent.
	deadLetters(ctx context.Context) (map[int64]bool, int, error)
	// states returns the status and attempts of the notifications ids.
	states(ctx context.Context, ids []int64) (map[int64]string, map[int64]int, error)
	// tally reads the notifications once drained.
	tally(ctx context.Context, drops []int64) (*tally, error)
	// events returns the ids of the events of the notifications ids,
	// which may be dead letters.
	events(ctx context.Context, ids []int64) (map[int64]bool, error)
	// throttleSpent counts the delivery attempts a 421 of the
	// smtp-throttle fault cost (a deferred one costs none).
	throttleSpent(ctx context.Context) (int, error)
	// conns counts herald's connections to the scratch database, -1 when
	// herald's connections are not there.
	conns(ctx context.Context) int
}

// tally is what the checks read of the store's notifications once drained.
type tally struct {
	// byKey is each notification's id and status by idempotency key;
	// keyless counts those without one.
	byKey   map[string]row
	keyless int
	// unprocessed counts the events not processed.
	unprocessed int
	// failed counts the failed notifications, otherFailed those of them
	// not among the drops.
	failed, otherFailed int
}

// storeNamed returns the row of the store named name.
func storeNamed(name string) *chaosStore {
	for i := range chaosStores {
		if chaosStores[i].name == name {
			return &chaosStores[i]
		}
	}
	panic("chaos: no store " + name)
}
