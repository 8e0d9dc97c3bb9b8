package postgres

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// scheduledRows is how many notifications scheduled for later
// TestClaimsAndStatsSkipScheduledRows writes ahead of a few due ones:
// 50,000, or HERALD_TEST_SCHEDULED_ROWS (issue 34's figure is 1,000,000).
func scheduledRows(t *testing.T) int {
	if v := os.Getenv("HERALD_TEST_SCHEDULED_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "HERALD_TEST_SCHEDULED_ROWS")
		return n
	}
	return 50_000
}

// Issue 34, points 1 and 5, and the backlog figures: behind many rows
// scheduled for later (of every priority, older ids than the due rows),
// the claims (the table transport's, the relays') walk one range of the
// due index per priority and read no row that is not due, and take the
// high rows first; the backlog counts the due rows only and reads the
// same ranges. The plans' reads are logged (EXPLAIN ANALYZE, BUFFERS).
func TestClaimsAndStatsSkipScheduledRows(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 600*time.Second)
	defer cancel()
	s, conn := openMeasured(t, ctx, 1, growthTables)
	n := scheduledRows(t)

	start := time.Now()
	_, err := conn.Exec(ctx, `INSERT INTO outbox (event_type, payload, available_at, priority)
SELECT 'notification.requested', '{}', now() + interval '30 days' + i * interval '1 second', (i % 3)::smallint
FROM generate_series(1, $1::int) AS i`, n)
	require.NoError(t, err)
	// Five due rows of each priority, bulk written first.
	for _, rank := range []int{notify.RankBulk, notify.RankNormal, notify.RankHigh} {
		_, err = conn.Exec(ctx, `INSERT INTO outbox (event_type, payload, priority) SELECT 'notification.requested', '{}', $1::smallint FROM generate_series(1, 5)`, rank)
		require.NoError(t, err)
	}
	analyseAll(t, ctx, conn)
	t.Logf("%d scheduled and 15 due rows written and analysed in %s", n, time.Since(start).Round(time.Millisecond))

	for _, st := range claimStatements() {
		if st.walk == "_status_unprocessed_idx" {
			continue
		}
		plan := explainPrepared(t, ctx, conn, claimPlan, "ANALYZE, BUFFERS, FORMAT JSON", st.sql, st.args)
		returned, removed, elsewhere := walkedRows(plan)
		hit, read := indexBuffers(plan)
		ms, _ := plan["Actual Total Time"].(float64)
		t.Logf("%s behind %d scheduled rows: walk returned %.0f rows, removed %.0f by filter (%.0f elsewhere), %.0f+%.0f index-scan buffers (hit+read), %.3f ms",
			st.name, n, returned, removed, elsewhere, hit, read, ms)
		assert.Empty(t, claimPlanProblems(plan, outboxLeaves(t, ctx, conn), st.walk), st.name)
		assert.EqualValues(t, 15, returned, "%s: the walk returns the due rows", st.name)
		assert.Zero(t, removed, "%s: the walk reads no row that is not due", st.name)
		assert.Zero(t, elsewhere, st.name)
	}

	if testing.Verbose() {
		rows, err := conn.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) `+selectOutboxStats, notify.ScheduledCap+1)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		t.Logf("outbox stats:\n%s", strings.Join(lines, "\n"))
	}
	var raw []byte
	require.NoError(t, conn.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+selectOutboxStats, notify.ScheduledCap+1).Scan(&raw))
	plan := firstPlan(t, raw)
	hit, _ := plan["Shared Hit Blocks"].(float64)
	read, _ := plan["Shared Read Blocks"].(float64)
	ms, _ := plan["Actual Total Time"].(float64)
	var seq []string
	planNodes(plan, func(n map[string]any) {
		if n["Node Type"] == "Seq Scan" {
			rel, _ := n["Relation Name"].(string)
			rows, _ := n["Actual Rows"].(float64)
			removed, _ := n["Rows Removed by Filter"].(float64)
			if rows+removed > 0 {
				seq = append(seq, rel)
			}
		}
	})
	t.Logf("outbox stats behind %d scheduled rows: %.0f+%.0f buffers (hit+read), %.3f ms (the scheduled count stops at %d)", n, hit, read, ms, notify.ScheduledCap+1)
	assert.Empty(t, seq, "the stats scan no outbox table")

	st, err := s.OutboxStats(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 15, st.Unprocessed, "the backlog is the due rows")
	assert.EqualValues(t, min(n, notify.ScheduledCap), st.Scheduled)
	assert.Equal(t, n > notify.ScheduledCap, st.ScheduledCapped)

	// Through the store: the high rows first, then the normal ones.
	ms7, err := s.Claim(ctx, "worker-t", 7, time.Minute)
	require.NoError(t, err)
	var got []notify.Priority
	for _, m := range ms7 {
		got = append(got, m.Priority)
	}
	want := []notify.Priority{"high", "high", "high", "high", "high", "normal", "normal"}
	assert.Equal(t, want, got)
}

// indexBuffers sums the shared buffers the index scans of an analysed
// plan hit and read.
func indexBuffers(plan map[string]any) (hit, read float64) {
	planNodes(plan, func(n map[string]any) {
		switch n["Node Type"] {
		case "Index Scan", "Index Only Scan":
			h, _ := n["Shared Hit Blocks"].(float64)
			r, _ := n["Shared Read Blocks"].(float64)
			hit, read = hit+h, read+r
		}
	})
	return hit, read
}

// firstPlan decodes EXPLAIN (FORMAT JSON)'s answer to its top node.
func firstPlan(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var out []map[string]any
	require.NoError(t, json.Unmarshal(raw, &out))
	require.Len(t, out, 1)
	return out[0]["Plan"].(map[string]any)
}
