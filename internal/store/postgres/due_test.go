package postgres

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// scheduledRetries is the number of retries not yet due that
// TestTableClaimReadsOnlyDueRows writes ahead of a few due rows: issue 32,
// point 8 (each claim read all 50,000, 17 ms a claim).
const scheduledRetries = 50_000

// planNodes calls visit for every node of plan.
func planNodes(plan map[string]any, visit func(n map[string]any)) {
	visit(plan)
	if kids, ok := plan["Plans"].([]any); ok {
		for _, k := range kids {
			planNodes(k.(map[string]any), visit)
		}
	}
}

// walkedRows returns what an analysed claim plan read from the outbox's
// partitions under its Merge Append (the rows the walk returned, and the
// rows it read and dropped by a filter) and the rows its other nodes
// dropped by a filter.
func walkedRows(plan map[string]any) (returned, removed, removedElsewhere float64) {
	var visit func(n map[string]any, underMerge bool)
	visit = func(n map[string]any, underMerge bool) {
		node, _ := n["Node Type"].(string)
		if node == "Merge Append" {
			underMerge = true
		}
		loops, _ := n["Actual Loops"].(float64)
		filtered, _ := n["Rows Removed by Filter"].(float64)
		rel, _ := n["Relation Name"].(string)
		switch {
		case underMerge && rel != "":
			rows, _ := n["Actual Rows"].(float64)
			returned += rows * loops
			removed += filtered * loops
		default:
			removedElsewhere += filtered * loops
		}
		if kids, ok := n["Plans"].([]any); ok {
			for _, k := range kids {
				visit(k.(map[string]any), underMerge)
			}
		}
	}
	visit(plan, false)
	return returned, removed, removedElsewhere
}

// The table transport's claim takes due rows in due order from the due
// index (outbox_work_due_idx) and reads no row that is not due: with
// 50,000 retries scheduled an hour ahead, older (lower ids) than five due
// rows, the claim's walk returns the five due rows and drops none by a
// filter, and a claim costs what it costs on an outbox of five rows. The
// claim's time is logged (median of 30 claims through Claim, each handing
// its rows back with Reschedule).
func TestTableClaimReadsOnlyDueRows(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 180*time.Second)
	defer cancel()
	s, conn := openMeasured(t, ctx, 1, growthTables)

	_, err := conn.Exec(ctx, `INSERT INTO outbox (event_type, payload, attempts, last_error, available_at)
SELECT 'notification.requested', '{}', 1, '451 try later', now() + interval '1 hour'
FROM generate_series(1, $1::int)`, scheduledRetries)
	require.NoError(t, err)
	const due = 5
	_, err = conn.Exec(ctx, `INSERT INTO outbox (event_type, payload) SELECT 'notification.requested', '{}' FROM generate_series(1, $1::int)`, due)
	require.NoError(t, err)
	analyseAll(t, ctx, conn)

	plan := explainPrepared(t, ctx, conn, claimPlan, "ANALYZE, BUFFERS, FORMAT JSON", claimDue, `'worker-t', 100, 60000000`)
	returned, removed, elsewhere := walkedRows(plan)
	var hit, read float64
	planNodes(plan, func(n map[string]any) {
		if rel, _ := n["Relation Name"].(string); rel != "" && n["Node Type"] == "Index Scan" {
			h, _ := n["Shared Hit Blocks"].(float64)
			r, _ := n["Shared Read Blocks"].(float64)
			hit, read = hit+h, read+r
		}
	})
	ms, _ := plan["Actual Total Time"].(float64)
	t.Logf("claim with %d scheduled retries and %d due rows: walk returned %.0f rows, removed %.0f by filter (%.0f elsewhere), %.0f+%.0f index-scan buffers, %.3f ms",
		scheduledRetries, due, returned, removed, elsewhere, hit, read, ms)
	assert.Empty(t, claimPlanProblems(plan, outboxLeaves(t, ctx, conn), dueWalks))
	assert.EqualValues(t, due, returned, "the walk returns the due rows")
	assert.Zero(t, removed, "the walk reads no row that is not due")
	assert.Zero(t, elsewhere)

	// Through the store, as the table transport claims: each claim takes
	// the five due rows, which go back due at once.
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
	t.Logf("Claim with %d scheduled retries: median %s, max %s (30 claims)", scheduledRetries,
		took[len(took)/2].Round(10*time.Microsecond), took[len(took)-1].Round(10*time.Microsecond))
	require.NoError(t, ctx.Err())
}

// Migration 0015 on a partitioned outbox with daily partitions: each
// partition gets the due index under its own name, and a row an older
// herald's worker leased (locked_until ahead, available_at passed) stays
// with it until its lease runs out, while a due row is claimed.
func TestUpgradeToDueIndex(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	s := openMigratedBefore(ctx, t, 15)
	require.NoError(t, s.EnsurePartitions(ctx))
	var leased, free int64
	require.NoError(t, s.pool.QueryRow(ctx, `INSERT INTO outbox (event_type, payload, locked_by, locked_until)
		VALUES ('notification.requested', '{}', 'old-worker', now() + interval '1 hour') RETURNING id`).Scan(&leased))
	require.NoError(t, s.pool.QueryRow(ctx, `INSERT INTO outbox (event_type, payload)
		VALUES ('notification.requested', '{}') RETURNING id`).Scan(&free))

	require.NoError(t, s.Migrate(ctx))
	rows, err := s.pool.Query(ctx, `SELECT relid::text FROM pg_partition_tree('outbox') WHERE isleaf`)
	require.NoError(t, err)
	leaves, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Greater(t, len(leaves), 2, "outbox_legacy and the daily partitions")
	for _, leaf := range leaves {
		require.Contains(t, indexFiles(t, s, leaf), leaf+"_work_due_idx")
	}
	ms, err := s.Claim(ctx, "new-worker", 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, ms, 1)
	require.Equal(t, free, ms[0].ID, "the row an older worker holds stays with it")
	require.NoError(t, s.Finish(ctx, []notify.OutboxKey{ms[0].Key()}, "new-worker", ""))
	_, err = s.pool.Exec(ctx, `UPDATE outbox SET locked_until = now() - interval '1 second' WHERE id = $1`, leased)
	require.NoError(t, err)
	ms, err = s.Claim(ctx, "new-worker", 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, ms, 1)
	require.Equal(t, leased, ms[0].ID, "once its lease ran out, it is due")
}
