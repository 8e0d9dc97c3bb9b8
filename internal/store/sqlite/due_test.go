package sqlite

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The table transport's claim searches the due index (outbox_work_due_idx)
// up to now, one range per priority, in due order, without a sort: with 50,000 retries scheduled an
// hour ahead, older (lower ids) than five due rows, it reads the due rows
// alone, and a claim costs what it costs on an outbox of five rows (issue
// 32, point 8). The claim's time is logged (median of 30 claims, each
// handing its rows back with Reschedule).
func TestTableClaimReadsOnlyDueRows(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ctx := t.Context()
	require.NoError(t, s.Migrate(ctx))
	const scheduled, due = 50_000, 5
	ahead, past := formatTime(now().Add(time.Hour)), formatTime(now().Add(-time.Second))
	_, err := s.write.ExecContext(ctx, `
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?)
INSERT INTO outbox (event_type, payload, occurred_at, available_at, attempts, last_error)
SELECT 'notification.requested', '{}', ?, ?, 1, '451 try later' FROM g`, scheduled, past, ahead)
	require.NoError(t, err)
	_, err = s.write.ExecContext(ctx, `
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?)
INSERT INTO outbox (event_type, payload, occurred_at, available_at)
SELECT 'notification.requested', '{}', ?, ? FROM g`, due, past, past)
	require.NoError(t, err)
	assertPlan := func(stage string) {
		t.Helper()
		t0 := formatTime(now())
		plan := queryPlan(t, s, claimOutbox, "worker-t", t0, t0, 32)
		t.Logf("claim, %s:\n%s", stage, plan)
		assert.Contains(t, plan, "USING INDEX outbox_work_due_idx (priority=? AND available_at<?)", "%s: the claim searches the due index up to now, one range per priority", stage)
		assert.NotContains(t, plan, "TEMP B-TREE", "%s: no sort", stage)

		plan = queryPlan(t, s, leaseRelayBatch, "relay-t", t0, t0, 32, nil)
		t.Logf("relay lease, %s:\n%s", stage, plan)
		assert.Contains(t, plan, "USING INDEX outbox_due_idx (priority=? AND available_at<?)", "%s: the relay searches its due index up to now", stage)
		assert.NotContains(t, plan, "TEMP B-TREE", "%s: no sort", stage)

		// The backlog figures read the due ranges, and count the
		// scheduled rows in the ranges past now up to a cap.
		plan = queryPlan(t, s, selectOutboxStats, t0, 100)
		t.Logf("outbox stats, %s:\n%s", stage, plan)
		assert.Contains(t, plan, "USING INDEX outbox_due_idx (priority=? AND available_at<?)", stage)
		assert.Contains(t, plan, "USING INDEX outbox_due_idx (priority=? AND available_at>?)", stage)
		assert.NotContains(t, plan, "SCAN outbox", stage)
	}
	assertPlan("no statistics")
	_, err = s.write.ExecContext(ctx, `ANALYZE`)
	require.NoError(t, err)
	assertPlan("analysed")

	var took []time.Duration
	for i := range 30 {
		start := time.Now()
		ms, err := s.Claim(ctx, "worker-t", 32, time.Minute)
		took = append(took, time.Since(start))
		require.NoError(t, err)
		require.Len(t, ms, due, "claim %d", i)
		for _, m := range ms {
			require.Zero(t, m.RetryCount, "a due row, not a scheduled retry")
			require.NoError(t, s.Reschedule(ctx, m.Key(), "worker-t", 0, "", false))
		}
	}
	slices.Sort(took)
	t.Logf("Claim with %d scheduled retries: median %s, max %s (30 claims)", scheduled,
		took[len(took)/2].Round(10*time.Microsecond), took[len(took)-1].Round(10*time.Microsecond))
}
