package sqlite

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/migrate"
	"github.com/heraldhq/herald/internal/testkit/deliverytest"
)

// Migration 0008 (the stale-copy guard) applies to a database with rows in
// processed_messages, done and claimed, and leaves them unmarked: every
// retry count passes.
func TestMigrateRetryGuardOnExistingRows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openTemp(t)
	ms, err := migrate.Load(migrationFS, "migrations")
	require.NoError(t, err)
	var before []migrate.Migration
	for _, m := range ms {
		if m.Version < 8 {
			before = append(before, m)
		}
	}
	require.Len(t, before, 7)
	require.NoError(t, migrate.Run(ctx, migrator{s}, before))

	// Written as SQL of that schema: today's Create writes columns of later
	// migrations (0012's traceparent).
	ts := formatTime(now())
	var nid int64
	require.NoError(t, s.write.QueryRowContext(ctx, `INSERT INTO notifications (user_id, channel, recipient, subject, body, created_at, updated_at)
		VALUES ('u', 'email', 'a@example.com', 's', 'b', ?1, ?1) RETURNING id`, ts).Scan(&nid))
	_, err = s.write.ExecContext(ctx, `INSERT INTO processed_messages (message_id, processed_at, lease_until, attempt_id)
		VALUES (1, ?1, NULL, NULL), (2, NULL, ?1, 99)`, ts)
	require.NoError(t, err)

	require.NoError(t, s.Migrate(ctx))
	var marked int
	require.NoError(t, s.read.QueryRowContext(ctx, `SELECT count(*) FROM processed_messages WHERE next_retry_count <> 0`).Scan(&marked))
	require.Zero(t, marked)
	require.Equal(t, 2, countRows(t, s, "processed_messages"))

	// The done row is a duplicate; the claimed one (its lease expired, no
	// mark) is taken by its message's redelivery, whatever its count.
	cs, err := deliverytest.Claim(ctx, s, []notify.ClaimRequest{{MessageID: 1, NotificationID: nid}}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, notify.ClaimDuplicate, cs[0].Status)
	cs, err = deliverytest.Claim(ctx, s, []notify.ClaimRequest{{MessageID: 2, NotificationID: nid}}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, notify.ClaimTaken, cs[0].Status)
}
