package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/migrate"
	"github.com/heraldhq/herald/internal/testkit/deliverytest"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// Migration 0008 (the stale-copy guard) applies to a database with rows in
// processed_messages, done and claimed, and leaves them unmarked: every
// retry count passes.
func TestMigrateRetryGuardOnExistingRows(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s := openMigratedBefore(ctx, t, 8)

	// Written as SQL of that schema: today's Create writes columns of later
	// migrations (0012's traceparent).
	var nid int64
	require.NoError(t, s.pool.QueryRow(ctx, `INSERT INTO notifications (user_id, channel, recipient, subject, body)
		VALUES ('u', 'email', 'a@example.com', 's', 'b') RETURNING id`).Scan(&nid))
	_, err := s.pool.Exec(ctx, `INSERT INTO processed_messages (message_id, processed_at, lease_until, attempt_id)
		VALUES (1, now(), NULL, NULL), (2, NULL, now(), 99)`)
	require.NoError(t, err)

	require.NoError(t, s.Migrate(ctx))
	require.Zero(t, count(t, s, `SELECT count(*) FROM processed_messages WHERE next_retry_count <> 0`))
	require.Equal(t, 2, count(t, s, `SELECT count(*) FROM processed_messages`))

	// The done row is a duplicate; the claimed one (no mark) is taken by
	// its message's redelivery, whatever its count.
	cs, err := deliverytest.Claim(ctx, s, []notify.ClaimRequest{{MessageID: 1, NotificationID: nid}}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, notify.ClaimDuplicate, cs[0].Status)
	cs, err = deliverytest.Claim(ctx, s, []notify.ClaimRequest{{MessageID: 2, NotificationID: nid}}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, notify.ClaimTaken, cs[0].Status)
}

// openMigratedBefore opens a scratch database migrated up to, not
// including, migration version: the schema an older herald left behind.
func openMigratedBefore(ctx context.Context, t *testing.T, version int) *Store {
	t.Helper()
	s, err := Open(ctx, testenv.PostgresURL(t), Config{})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	ms, err := migrate.Load(migrationFS, "migrations")
	require.NoError(t, err)
	var before []migrate.Migration
	for _, m := range ms {
		if m.Version < version {
			before = append(before, m)
		}
	}
	require.Len(t, before, version-1)
	require.NoError(t, migrate.Run(ctx, migrator{s}, before))
	return s
}
