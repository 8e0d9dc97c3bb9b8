package postgres

import (
	"slices"
	"strings"
	"testing"
	"time"

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
		SELECT 'user-' || (i % 2000), 'email', 'a@example.com', 's', repeat('b', 200),
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
		// status index filters nothing the time index does not).
		index string
		// sortOK: for a few rows the planner may prefer a bitmap scan of
		// the user's index (alone, or ANDed with the dead letters' one
		// for a status) and a sort of what it found: one user's rows, never
		// the table. No index of its own serves a user and a status
		// together, as each index costs every create.
		sortOK bool
	}{
		{"everything", notify.ListFilter{}, "notifications_created_idx", false},
		{"everything, next page", notify.ListFilter{After: cursor}, "notifications_created_idx", false},
		{"window", notify.ListFilter{CreatedAfter: now.Add(-48 * time.Hour), CreatedBefore: now.Add(-24 * time.Hour)}, "notifications_created_idx", false},
		{"user", notify.ListFilter{UserID: "user-7"}, "notifications_user_created_idx", true},
		{"user, next page", notify.ListFilter{UserID: "user-7", After: cursor}, "notifications_user_created_idx", true},
		{"user and status", notify.ListFilter{UserID: "user-7", Status: notify.StatusFailed}, "notifications_user_created_idx", true},
		{"user in a window", notify.ListFilter{UserID: "user-7", CreatedAfter: now.Add(-7 * 24 * time.Hour)}, "notifications_user_created_idx", true},
		{"status", notify.ListFilter{Status: notify.StatusFailed}, "notifications_status_created_idx", false},
		{"status, next page, window", notify.ListFilter{Status: notify.StatusPending, After: cursor, CreatedAfter: now.Add(-48 * time.Hour)}, "notifications_status_created_idx|notifications_created_idx", false},
	} {
		tc.f.Limit = 50
		q, args := listQuery(tc.f)
		plan := explain(t, s, q, args...)
		t.Logf("%s:\n%s", tc.name, plan)
		require.True(t, slices.ContainsFunc(strings.Split(tc.index, "|"), func(ix string) bool {
			return strings.Contains(plan, ix)
		}), "%s: the plan reads none of %s", tc.name, tc.index)
		require.NotContains(t, plan, "Seq Scan", tc.name)
		if !tc.sortOK {
			require.NotContains(t, plan, "Sort", tc.name)
		}
	}

	plan := explain(t, s, selectAttempts, int64(7))
	t.Logf("attempts:\n%s", plan)
	require.Contains(t, plan, "delivery_attempts_notification_idx")
	require.Contains(t, plan, "notifications_pkey")
}
