package postgres

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// addAttempt writes a delivery_attempts row as the worker would, for the
// conformance suite's attempts subtests.
func addAttempt(s *Store) func(t testing.TB, notificationID int64, a notify.Attempt) {
	return func(t testing.TB, notificationID int64, a notify.Attempt) {
		t.Helper()
		_, err := s.pool.Exec(t.Context(), `INSERT INTO delivery_attempts
			(notification_id, message_id, attempt, started_at, finished_at, outcome, error)
			VALUES ($1, $2, $3, $4, $5, NULLIF($6, ''), NULLIF($7, ''))`,
			notificationID, a.MessageID, a.Attempt, a.StartedAt, a.FinishedAt, a.Outcome, a.Error)
		require.NoError(t, err)
	}
}

// explainList returns the plan of a listing's query as List runs it, after
// listPlan in the same transaction.
func explainList(t *testing.T, s *Store, query string, args ...any) string {
	t.Helper()
	tx, err := s.pool.Begin(t.Context())
	require.NoError(t, err)
	defer rollback(tx)
	_, err = tx.Exec(t.Context(), listPlan)
	require.NoError(t, err)
	rows, err := tx.Query(t.Context(), "EXPLAIN "+query, args...)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}

// listRows is the size of the notifications table TestListUsesIndexes
// writes: enough that a sequential scan and a sort cost the planner more
// than the indexes.
const listRows = 200_000

// Every shape of the listing reads an index of migration 0005 in order: no
// sequential scan of the table and no sort, whatever the filters, on the
// first page and on the next ones.
func TestListUsesIndexes(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	start := time.Now()
	// 2000 users; one notification in 50 failed, a third sent; spread over
	// 30 days.
	_, err := s.pool.Exec(ctx, `INSERT INTO notifications
		(user_id, channel, recipient, subject, body, status, created_at, updated_at)
		SELECT 'user-' || (i % 2000), CASE WHEN i % 20 = 0 THEN 'webhook' ELSE 'email' END, 'a@example.com', 's', repeat('b', 200),
			CASE WHEN i % 50 = 0 THEN 'failed' WHEN i % 3 = 0 THEN 'sent' ELSE 'pending' END,
			now() - (i || ' seconds')::interval * 13, now()
		FROM generate_series(1, $1::int) AS i`, listRows)
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, "ANALYZE notifications")
	require.NoError(t, err)
	t.Logf("%d notifications written and analyzed in %s", listRows, time.Since(start).Round(time.Millisecond))

	now := time.Now()
	cursor := &notify.ListPosition{CreatedAt: now.Add(-24 * time.Hour), ID: listRows / 2}
	for _, tc := range []struct {
		name string
		f    notify.ListFilter
		// index names the index the plan must read; "a|b" accepts
		// either, where the statistics decide (pending is most rows: its
		// status index filters nothing the time index does not). No index
		// of its own serves a user and a status together, as each index
		// costs every create: the user's index is read and the status
		// filtered.
		index string
	}{
		{"everything", notify.ListFilter{}, "notifications_created_idx"},
		{"everything, next page", notify.ListFilter{After: cursor}, "notifications_created_idx"},
		{"window", notify.ListFilter{CreatedAfter: now.Add(-48 * time.Hour), CreatedBefore: now.Add(-24 * time.Hour)}, "notifications_created_idx"},
		{"user", notify.ListFilter{UserID: "user-7"}, "notifications_user_created_idx"},
		{"user, next page", notify.ListFilter{UserID: "user-7", After: cursor}, "notifications_user_created_idx"},
		{"user and status", notify.ListFilter{UserID: "user-7", Status: notify.StatusFailed}, "notifications_user_created_idx"},
		{"user in a window", notify.ListFilter{UserID: "user-7", CreatedAfter: now.Add(-7 * 24 * time.Hour)}, "notifications_user_created_idx"},
		{"status", notify.ListFilter{Status: notify.StatusFailed}, "notifications_status_created_idx"},
		{"status pending", notify.ListFilter{Status: notify.StatusPending}, "notifications_status_created_idx|notifications_created_idx"},
		{"channel", notify.ListFilter{Channel: "webhook"}, "notifications_channel_created_idx"},
		{"channel, next page", notify.ListFilter{Channel: "webhook", After: cursor}, "notifications_channel_created_idx"},
		{"channel and user", notify.ListFilter{Channel: "webhook", UserID: "user-20"}, "notifications_user_created_idx"},
		{"channel and status", notify.ListFilter{Channel: "webhook", Status: notify.StatusFailed}, "notifications_status_created_idx|notifications_channel_created_idx"},
		{"status, next page, window", notify.ListFilter{Status: notify.StatusPending, After: cursor, CreatedAfter: now.Add(-48 * time.Hour)}, "notifications_status_created_idx|notifications_created_idx"},
	} {
		tc.f.Limit = 50
		q, args := listQuery(tc.f)
		plan := explainList(t, s, q, args...)
		t.Logf("%s:\n%s", tc.name, plan)
		require.True(t, slices.ContainsFunc(strings.Split(tc.index, "|"), func(ix string) bool {
			return strings.Contains(plan, ix)
		}), "%s: the plan reads none of %s", tc.name, tc.index)
		require.NotContains(t, plan, "Seq Scan", tc.name)
		require.NotContains(t, plan, "Sort", tc.name)
	}

	for _, q := range []string{selectAttempts, selectAttemptsNewest} {
		plan := explain(t, s, q, int64(7), int64(3), int64(21))
		t.Logf("attempts:\n%s", plan)
		require.Contains(t, plan, "delivery_attempts_notification_idx")
		require.Contains(t, plan, "notifications_pkey")
		// The index reads the page alone (its Limit is inside the
		// lateral): only the page's rows are sorted.
		require.Regexp(t, `Limit[^\n]*\n\s*->  Index Scan[^\n]* using delivery_attempts_notification_idx`, plan)
	}
}
