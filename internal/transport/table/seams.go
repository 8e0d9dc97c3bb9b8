package table

import (
	"context"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// Queue is the outbox table used directly as a queue, with leases. The stores
// implement it.
type Queue interface {
	// Claim leases up to limit due notification.requested outbox rows
	// (processed_at IS NULL, available_at <= now, no live lease; never a
	// status event, which is the status relay's), the earliest due first
	// (available_at, then id), to token until now + lease, and returns
	// them as messages whose RetryCount is the row's attempts. Due order,
	// from an index that holds the due time first, means a row handed
	// back due at once goes behind the rows due before it, and a claim
	// reads no row scheduled for later. PostgreSQL claims with FOR UPDATE
	// SKIP LOCKED; SQLite with one UPDATE ... RETURNING.
	Claim(ctx context.Context, token string, limit int, lease time.Duration) ([]notify.Message, error)
	// Finish marks rows leased to token processed (processed_at = now), in
	// one statement; a non-empty reason marks them dead-lettered and keeps
	// the reason (last_error). A row no longer leased to token is left
	// alone. Rows are named by their keys as Claim returned them
	// (Message.Key): PostgreSQL finds a row in its day's partition of the
	// outbox by its occurred_at; the other stores use only the id.
	Finish(ctx context.Context, rows []notify.OutboxKey, token, reason string) error
	// Reschedule ends the lease of a row leased to token and makes it due
	// again after delay; with retry it counts a retry (attempts+1) and keeps
	// reason (last_error). A row no longer leased to token is left alone.
	// The row is named as in Finish.
	Reschedule(ctx context.Context, row notify.OutboxKey, token string, delay time.Duration, reason string, retry bool) error
}
