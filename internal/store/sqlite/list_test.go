package sqlite

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// Every shape of the listing reads an index of migration 0005 in order:
// no full scan of the table and no temporary B-tree for the ORDER BY.
func TestListUsesIndexes(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ctx := t.Context()
	require.NoError(t, s.Migrate(ctx))
	// A table with statistics, so that the planner weighs the indexes as
	// it would in a long-running installation.
	_, err := s.write.ExecContext(ctx, `
WITH RECURSIVE i(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM i WHERE n < 20000)
INSERT INTO notifications (user_id, channel, recipient, subject, body, status, created_at, updated_at)
SELECT 'user-' || (n % 500), CASE WHEN n % 20 = 0 THEN 'webhook' ELSE 'email' END, 'a@example.com', 's', 'b',
	CASE WHEN n % 50 = 0 THEN 'failed' WHEN n % 3 = 0 THEN 'sent' ELSE 'pending' END,
	strftime('%Y-%m-%dT%H:%M:%f000Z', 'now', '-' || (n * 13) || ' seconds'), '2026-01-01T00:00:00.000000Z'
FROM i`)
	require.NoError(t, err)
	_, err = s.write.ExecContext(ctx, "ANALYZE")
	require.NoError(t, err)

	now := time.Now()
	cursor := &notify.ListPosition{CreatedAt: now.Add(-24 * time.Hour), ID: 10000}
	for _, tc := range []struct {
		name  string
		f     notify.ListFilter
		index string
	}{
		{"everything", notify.ListFilter{}, "notifications_created_idx"},
		{"everything, next page", notify.ListFilter{After: cursor}, "notifications_created_idx"},
		{"window", notify.ListFilter{CreatedAfter: now.Add(-48 * time.Hour), CreatedBefore: now.Add(-24 * time.Hour)}, "notifications_created_idx"},
		{"user", notify.ListFilter{UserID: "user-7"}, "notifications_user_created_idx"},
		{"user, next page", notify.ListFilter{UserID: "user-7", After: cursor}, "notifications_user_created_idx"},
		{"user and status", notify.ListFilter{UserID: "user-7", Status: notify.StatusFailed}, "notifications_user_created_idx"},
		{"status", notify.ListFilter{Status: notify.StatusFailed}, "notifications_status_created_idx"},
		{"channel", notify.ListFilter{Channel: "webhook"}, "notifications_channel_created_idx"},
		{"channel, next page", notify.ListFilter{Channel: "webhook", After: cursor}, "notifications_channel_created_idx"},
		{"channel and user", notify.ListFilter{Channel: "webhook", UserID: "user-20"}, "notifications_user_created_idx"},
		{"status, next page, window", notify.ListFilter{Status: notify.StatusPending, After: cursor, CreatedAfter: now.Add(-48 * time.Hour)}, "notifications_status_created_idx"},
	} {
		tc.f.Limit = 50
		q, args := listQuery(tc.f)
		plan := queryPlan(t, s, q, args...)
		t.Logf("%s:\n%s", tc.name, plan)
		require.Contains(t, plan, "USING INDEX "+tc.index, tc.name)
		require.NotContains(t, plan, "TEMP B-TREE", tc.name)
	}

	for _, q := range []string{selectAttempts, selectAttemptsNewest} {
		plan := queryPlan(t, s, q, int64(7), int64(3), int64(21))
		t.Logf("attempts:\n%s", plan)
		require.Contains(t, plan, "delivery_attempts_notification_idx")
		require.NotContains(t, plan, "TEMP B-TREE")
	}
}

// queryPlan returns the EXPLAIN QUERY PLAN of query, one step a line.
func queryPlan(t *testing.T, s *Store, query string, args ...any) string {
	t.Helper()
	rows, err := s.read.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+query, args...)
	require.NoError(t, err)
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var id, parent, notUsed int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &notUsed, &detail))
		lines = append(lines, detail)
	}
	require.NoError(t, rows.Err())
	return strings.Join(lines, "\n")
}
