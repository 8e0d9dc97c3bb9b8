package postgres

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// planScans lists the scans of a JSON plan as "Node Type on relation
// using index", and every node type met.
func planScans(n map[string]any, scans, nodes *[]string) {
	node, _ := n["Node Type"].(string)
	*nodes = append(*nodes, node)
	if rel, _ := n["Relation Name"].(string); rel != "" {
		idx, _ := n["Index Name"].(string)
		*scans = append(*scans, node+" on "+rel+" using "+idx)
	} else if idx, _ := n["Index Name"].(string); idx != "" {
		*scans = append(*scans, node+" using "+idx)
	}
	if kids, ok := n["Plans"].([]any); ok {
		for _, k := range kids {
			planScans(k.(map[string]any), scans, nodes)
		}
	}
}

// pendingPlan explains selectPendingStats as the store's connections run
// it: a prepared statement, with the generic plan (made once, whatever
// the cap) and with the custom plan of the cap.
func pendingPlan(t *testing.T, ctx context.Context, conn *pgx.Conn, mode string) (scans, nodes []string) {
	t.Helper()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SET LOCAL plan_cache_mode = `+mode)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `PREPARE pending_probe AS `+selectPendingStats)
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(ctx, `DEALLOCATE pending_probe`) }()
	var raw []byte
	require.NoError(t, tx.QueryRow(ctx, `EXPLAIN (FORMAT JSON) EXECUTE pending_probe(`+strconv.Itoa(notify.PendingCap+1)+`)`).Scan(&raw))
	var out []map[string]any
	require.NoError(t, json.Unmarshal(raw, &out))
	planScans(out[0]["Plan"].(map[string]any), &scans, &nodes)
	return scans, nodes
}

// The console's and GET /status's count of the pending notifications
// reads the pending entries of notifications_status_created_idx alone,
// in order (no sort), whatever the history of settled notifications
// beside them, with young statistics or analysed; past the cap it stops.
func TestPendingStatsPlan(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	s, conn := openMeasured(t, ctx, 1, []string{"notifications"})

	// The indexes of pending entries alone (partial on status 'pending',
	// or led by status).
	pendingIndexes := `notifications_(pending|destination_pending|status_created)_idx`
	check := func(stage string, sorted bool) {
		t.Helper()
		for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
			scans, nodes := pendingPlan(t, ctx, conn, mode)
			t.Logf("%s, %s: %v", stage, mode, scans)
			require.NotEmpty(t, scans)
			for _, sc := range scans {
				if strings.HasPrefix(sc, "Bitmap Heap Scan") {
					continue // its Bitmap Index Scan names the index
				}
				require.Regexp(t, ` using `+pendingIndexes+`$`, sc, "%s, %s: only the pending entries are read", stage, mode)
			}
			require.NotContains(t, nodes, "Seq Scan", "%s, %s", stage, mode)
			if sorted {
				require.NotContains(t, nodes, "Sort", "%s, %s: the oldest is the first entry in the index's order", stage, mode)
			}
		}
	}
	check("empty", false)

	// A long history: 100,000 sent (as many as the cap below needs),
	// 2,000 dead-lettered, 3,000 pending.
	_, err := conn.Exec(ctx, `INSERT INTO notifications (user_id, channel, recipient, subject, body, status, attempts, sent_at, failed_at, created_at)
SELECT 'u' || (g % 1000), 'email', 'a@example.com', 's', 'b',
	CASE WHEN g <= 100000 THEN 'sent' WHEN g <= 102000 THEN 'failed' ELSE 'pending' END,
	1, CASE WHEN g <= 100000 THEN now() END, CASE WHEN g > 100000 AND g <= 102000 THEN now() END,
	now() - (105000 - g) * interval '1 second'
FROM generate_series(1, 105000) AS g`)
	require.NoError(t, err)
	check("grown, young statistics", false)
	analyseAll(t, ctx, conn)
	check("grown", true)

	st, err := s.PendingStats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3000, st.Pending)
	require.False(t, st.Capped)
	require.GreaterOrEqual(t, st.OldestAge, 2999*time.Second, "the oldest pending one was created 3,000 s ago")

	// Past the cap the count stops at it. (With a third of the table
	// pending, the planner may rightly read the table in order until the
	// cap: the plan is not checked there.)
	_, err = conn.Exec(ctx, `UPDATE notifications SET status = 'pending', sent_at = NULL WHERE id <= $1`, notify.PendingCap)
	require.NoError(t, err)
	analyseAll(t, ctx, conn)
	start := time.Now()
	st, err = s.PendingStats(ctx)
	require.NoError(t, err)
	t.Logf("pending stats past the cap (%d pending) read in %s", notify.PendingCap+3000, time.Since(start).Round(time.Millisecond))
	require.EqualValues(t, notify.PendingCap, st.Pending)
	require.True(t, st.Capped)
	require.Greater(t, st.OldestAge, 100000*time.Second, "the oldest is the first of the history, set pending again")
}
