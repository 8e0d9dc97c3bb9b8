package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// keyedStatement is one statement of the delivery bookkeeping's batch, with
// arguments to explain it with (literals: EXECUTE takes no bind
// parameters).
type keyedStatement struct {
	name, sql, args string
}

// keyedStatements are the statements that run after keyedPlan in
// ClaimAndRecord's batch.
var keyedStatements = []keyedStatement{
	{"lock", lockNotifications, `'{1,2,3,4,5,6,7,8}'::bigint[]`},
	{"record", recordDeliveries, `'{1,2}'::bigint[], '{1,2}'::bigint[], '{1,2}'::bigint[], '{sent,retry}'::text[],
		'{"",x}'::text[], '{0,1000}'::bigint[], '{0,0}'::bigint[], true, '{"",""}'::text[]`},
	{"claim", claimDeliveries, `'{1,2}'::bigint[], '{1,2}'::bigint[], 60000000, '{0,0}'::bigint[], true`},
}

// keyIndexes are the only indexes a statement after keyedPlan may read a
// table through, and the column its index condition must bound: the
// primary key, and the notification's attempts for the previous attempt
// number.
var keyIndexes = map[string]string{
	"notifications_pkey":                 "id",
	"processed_messages_pkey":            "message_id",
	"delivery_attempts_pkey":             "id",
	"delivery_attempts_notification_idx": "notification_id",
	"outbox_pkey":                        "id",
}

// genericPlan returns the plan that a connection of the store makes for
// sql after keyedPlan: the generic plan, made with the tables' current
// statistics and size, in JSON.
func genericPlan(t *testing.T, ctx context.Context, conn *pgx.Conn, st keyedStatement) map[string]any {
	t.Helper()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, keyedPlan)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `PREPARE keyed_probe AS `+st.sql)
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(ctx, `DEALLOCATE keyed_probe`) }()
	var out []map[string]any
	var raw []byte
	require.NoError(t, tx.QueryRow(ctx, `EXPLAIN (FORMAT JSON, VERBOSE) EXECUTE keyed_probe(`+st.args+`)`).Scan(&raw))
	require.NoError(t, json.Unmarshal(raw, &out))
	require.Len(t, out, 1)
	return out[0]["Plan"].(map[string]any)
}

// planReads lists every scan of a table in plan that is not a lookup by
// key (keyIndexes): what a plan made once may read in proportion to a
// table.
func planReads(plan map[string]any) (keyed []string, other []string) {
	var walk func(n map[string]any, parent string)
	walk = func(n map[string]any, parent string) {
		node, _ := n["Node Type"].(string)
		rel, _ := n["Relation Name"].(string)
		if rel != "" && node != "ModifyTable" {
			index, _ := n["Index Name"].(string)
			cond, _ := n["Index Cond"].(string)
			col, ok := keyIndexes[index]
			desc := fmt.Sprintf("%s on %s using %s, cond %s", node, rel, index, cond)
			switch {
			case !ok || (node != "Index Scan" && node != "Index Only Scan") ||
				!regexp.MustCompile(`^\(+(\w+\.)?`+col+` = `).MatchString(cond):
				other = append(other, desc)
			case parent == "Nested Loop" && n["Parent Relationship"] == "Inner" &&
				regexp.MustCompile(`^\((\w+\.)?`+col+` = ANY \(\$\d+\)\)$`).MatchString(cond):
				// The batch's keys looked up again for every row of
				// the outer side.
				other = append(other, desc+", rescanned for each outer row")
			default:
				keyed = append(keyed, desc)
			}
		}
		if node == "Materialize" || strings.HasPrefix(node, "Bitmap") || node == "Seq Scan" {
			other = append(other, node)
		}
		if kids, ok := n["Plans"].([]any); ok {
			for _, k := range kids {
				walk(k.(map[string]any), node)
			}
		}
	}
	walk(plan, "")
	return keyed, other
}

// assertKeyedPlans checks the generic plan of every statement of the
// delivery bookkeeping: each table is read only by a lookup of its key.
// Unless strict, it only reports the other reads.
func assertKeyedPlans(t *testing.T, ctx context.Context, conn *pgx.Conn, stage string, strict bool) {
	t.Helper()
	for _, st := range keyedStatements {
		plan := genericPlan(t, ctx, conn, st)
		keyed, other := planReads(plan)
		require.NotEmpty(t, keyed, "%s, %s", stage, st.name)
		if strict {
			assert.Empty(t, other, "%s, %s: reads other than by key (keyed: %v)", stage, st.name, keyed)
		} else if len(other) > 0 {
			t.Logf("%s, %s: reads other than by key: %s", stage, st.name, strings.Join(other, "; "))
		}
		if testing.Verbose() {
			t.Logf("%s, %s: %s", stage, st.name, strings.Join(keyed, "; "))
		}
	}
}

// The delivery bookkeeping runs on plans made once per connection
// (keyedPlan), so each of its statements must read every table by key
// whatever the statistics the plan was made with: on a new database (never
// analysed), a young one (a few dozen rows) and a grown one, analysed or
// not since it grew. TestDeliveryCostStaysWithBatchAsTablesGrow measures
// what the plans read; this test names the reads.
//
// One state is reported, not asserted: tables analysed while empty and
// still of zero pages when the plan is made. Every index then costs the
// same (one tuple, one page) and the planner keeps the one it considered
// first, which for notifications and delivery_attempts is not the key's
// (deliver.go, "Plans", says why that is tolerated).
func TestDeliveryPlansReadOnlyKeys(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	s, conn := openMeasured(t, ctx, 1, growthTables)

	assertKeyedPlans(t, ctx, conn, "new", true)
	analyseAll(t, ctx, conn)
	assertKeyedPlans(t, ctx, conn, "empty, analysed", false)

	young := newCostMeter(t, ctx, s, conn)
	createN(t, ctx, s, 24)
	require.Equal(t, 24, deliverAll(t, ctx, s, 8, 4, 1000, young))
	analyseAll(t, ctx, conn)
	assertKeyedPlans(t, ctx, conn, "young", true)

	growTables(t, ctx, conn, notify.StatusSent, 20_000)
	growTables(t, ctx, conn, notify.StatusPending, 5_000)
	assertKeyedPlans(t, ctx, conn, "grown, young statistics", true)
	analyseAll(t, ctx, conn)
	assertKeyedPlans(t, ctx, conn, "grown", true)
}

// assertGenericPlans checks that the delivery bookkeeping's statements
// (keyedPlan) and the notifications relay's lease (claimPlan) ran on the
// generic plans of s's connection and never on a custom plan: that what
// TestDeliveryCostStaysWithBatchAsTablesGrow measures is what plans made
// once read. s has one pooled connection.
func assertGenericPlans(t *testing.T, ctx context.Context, s *Store) {
	t.Helper()
	lease, _ := leaseStatement([]string{notify.EventRequested})
	names := map[string]string{lockNotifications: "lock", recordDeliveries: "record", claimDeliveries: "claim", lease: "relay lease"}
	seen := map[string]bool{}
	c, err := s.pool.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()
	rows, err := c.Query(ctx, `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var (
			sql             string
			generic, custom int64
		)
		require.NoError(t, rows.Scan(&sql, &generic, &custom))
		if name, ok := names[sql]; ok {
			seen[name] = true
			assert.Positive(t, generic, "%s: generic plans", name)
			assert.Zero(t, custom, "%s: custom plans", name)
		}
	}
	require.NoError(t, rows.Err())
	assert.Len(t, seen, len(names), "statements prepared: %v", seen)
}

// claimStatement is a claim that runs after claimPlan, with arguments to
// explain it with (literals) and the suffix of the partial index its walk
// must take in every partition (<partition><suffix>); several suffixes,
// separated by spaces, for a claim of several walks, each a Merge Append
// of its own (the relay of every type: the status events, then the due
// work).
type claimStatement struct {
	name, sql, args, walk string
}

// claimStatements are the claims of the relays herald runs (every type;
// the notifications; the status events) and the table transport's.
func claimStatements() []claimStatement {
	lease := func(types []string) string {
		sql, _ := leaseStatement(types)
		return sql
	}
	return []claimStatement{
		{"relay lease", lease(nil), `100, 'relay-t', 60000000`, "_status_unprocessed_idx " + dueWalks},
		{"notifications relay lease", lease([]string{notify.EventRequested}), `100, 'relay-t', 60000000`, dueWalks},
		{"status relay lease", lease(notify.StatusEventTypes), `100, 'relay-t', 60000000`, "_status_unprocessed_idx"},
		{"table claim", claimDue, `'worker-t', 100, 60000000`, dueWalks},
	}
}

// dueWalks is the walk of a claim of due work rows: one range of
// outbox_work_due_idx per priority rank, each a Merge Append of its own
// (rankedDue).
var dueWalks = strings.TrimSpace(strings.Repeat("_work_due_idx ", notify.RankCount))

// explainPrepared explains sql as a prepared statement executed with args
// after setup (claimPlan) in one transaction that is rolled back, as a
// connection of the store would run it: with force_generic_plan, the
// generic plan. opts are EXPLAIN's options, FORMAT JSON among them.
func explainPrepared(t *testing.T, ctx context.Context, conn *pgx.Conn, setup, opts, sql, args string) map[string]any {
	t.Helper()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, setup)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `PREPARE claim_probe AS `+sql)
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(ctx, `DEALLOCATE claim_probe`) }()
	var out []map[string]any
	var raw []byte
	require.NoError(t, tx.QueryRow(ctx, `EXPLAIN (`+opts+`) EXECUTE claim_probe(`+args+`)`).Scan(&raw))
	require.NoError(t, json.Unmarshal(raw, &out))
	require.Len(t, out, 1)
	return out[0]["Plan"].(map[string]any)
}

// outboxLeaves lists the outbox's partitions.
func outboxLeaves(t *testing.T, ctx context.Context, conn *pgx.Conn) []string {
	t.Helper()
	return leafTables(t, ctx, conn, "outbox")
}

// claimPlanProblems returns what is wrong with a claim's generic plan:
// anything but a Merge Append of every partition's partial index walk
// (<partition><walk>) under the claim, and a lookup of the claimed rows'
// key in each partition (<partition>_pkey, on id and the span of
// occurred_at) for the lease. No sort, hash, merge join, materialization,
// sequential or bitmap scan.
func claimPlanProblems(plan map[string]any, leaves []string, walk string) []string {
	var problems []string
	walks := strings.Fields(walk)
	walked := map[string]bool{}
	merges := 0
	var visit func(n map[string]any, underMerge bool)
	visit = func(n map[string]any, underMerge bool) {
		node, _ := n["Node Type"].(string)
		rel, _ := n["Relation Name"].(string)
		index, _ := n["Index Name"].(string)
		cond, _ := n["Index Cond"].(string)
		switch node {
		case "Merge Append":
			merges++
			underMerge = true
		case "Seq Scan", "Sort", "Incremental Sort", "Hash", "Hash Join", "Merge Join", "Materialize",
			"Bitmap Heap Scan", "Bitmap Index Scan":
			problems = append(problems, fmt.Sprintf("%s on %q", node, rel))
		}
		if rel != "" && node != "ModifyTable" {
			switch {
			case node != "Index Scan":
				problems = append(problems, fmt.Sprintf("%s on %s", node, rel))
			case underMerge && slices.ContainsFunc(walks, func(w string) bool { return index == rel+w }):
				walked[index] = true
			case underMerge:
				problems = append(problems, fmt.Sprintf("claim walks %s on %s, want %s", index, rel, rel+walk))
			case index != rel+"_pkey" || !strings.Contains(cond, "id = ANY") || !strings.Contains(cond, "occurred_at >= ") ||
				!strings.Contains(cond, "occurred_at <= "):
				filter, _ := n["Filter"].(string)
				problems = append(problems, fmt.Sprintf("lease looks up %s by %s, cond %q, filter %q", rel, index, cond, filter))
			}
		}
		if kids, ok := n["Plans"].([]any); ok {
			for _, k := range kids {
				visit(k.(map[string]any), underMerge)
			}
		}
	}
	visit(plan, false)
	if merges != len(walks) {
		problems = append(problems, fmt.Sprintf("%d Merge Appends, want %d", merges, len(walks)))
	}
	for _, leaf := range leaves {
		for _, w := range walks {
			if !walked[leaf+w] {
				problems = append(problems, "claim does not walk "+leaf+w)
			}
		}
	}
	return problems
}

// assertClaimPlans checks the generic plan of every claim (claimPlan).
// Unless strict, it only reports what is wrong.
func assertClaimPlans(t *testing.T, ctx context.Context, conn *pgx.Conn, stage string, strict bool) {
	t.Helper()
	leaves := outboxLeaves(t, ctx, conn)
	require.Greater(t, len(leaves), 2, "the outbox's partitions")
	for _, st := range claimStatements() {
		plan := explainPrepared(t, ctx, conn, claimPlan, "FORMAT JSON, VERBOSE", st.sql, st.args)
		problems := claimPlanProblems(plan, leaves, st.walk)
		if strict {
			assert.Empty(t, problems, "%s, %s", stage, st.name)
		} else if len(problems) > 0 {
			t.Logf("%s, %s: %s", stage, st.name, strings.Join(problems, "; "))
		}
	}
}

// executedLookups returns the partitions whose key lookup ran (Actual
// Loops > 0) in an analysed plan: the lease's inner side, outside the
// Merge Append.
func executedLookups(plan map[string]any) []string {
	var out []string
	var visit func(n map[string]any, underMerge bool)
	visit = func(n map[string]any, underMerge bool) {
		node, _ := n["Node Type"].(string)
		if node == "Merge Append" {
			underMerge = true
		}
		rel, _ := n["Relation Name"].(string)
		if loops, _ := n["Actual Loops"].(float64); rel != "" && node == "Index Scan" && !underMerge && loops > 0 {
			out = append(out, rel)
		}
		if kids, ok := n["Plans"].([]any); ok {
			for _, k := range kids {
				visit(k.(map[string]any), underMerge)
			}
		}
	}
	visit(plan, false)
	return out
}

// The claims run on plans made once per connection (claimPlan) over the
// partitioned outbox, so each plan must walk every partition's partial
// index of its rows in its order (id for the relays, due time for the
// table claim), merged, and look each claimed row up in
// its own partition by its whole key, whatever the statistics it was made
// with: new (never analysed), young, grown with young statistics, grown.
// As for the delivery bookkeeping, tables analysed while empty are
// reported, not asserted (claimPlan's comment). The lease's lookups are
// pruned at run time: a claim of rows of two days looks up only those
// two partitions.
func TestClaimPlansWalkPartialIndexes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	s, conn := openMeasured(t, ctx, 1, growthTables)

	assertClaimPlans(t, ctx, conn, "new", true)
	analyseAll(t, ctx, conn)
	assertClaimPlans(t, ctx, conn, "empty, analysed", false)

	// Young: a few rows, relayed and claimed, statistics gathered.
	createN(t, ctx, s, 24)
	relayAll(t, s)
	analyseAll(t, ctx, conn)
	assertClaimPlans(t, ctx, conn, "young", true)

	// Grown: a history of processed rows and a backlog, in outbox_legacy
	// (today: before the bound migration 0014 set) and in two of the
	// daily partitions ahead.
	growTables(t, ctx, conn, notify.StatusSent, 20_000)
	growTables(t, ctx, conn, notify.StatusPending, 5_000)
	_, err := conn.Exec(ctx, `INSERT INTO outbox (event_type, payload, occurred_at, processed_at)
SELECT 'notification.requested', '{}', now() + (1 + (g / 10) % 2) * interval '1 day', CASE WHEN g % 10 > 0 THEN now() END
FROM generate_series(1, 20000) AS g`)
	require.NoError(t, err)
	assertClaimPlans(t, ctx, conn, "grown, young statistics", true)
	analyseAll(t, ctx, conn)
	assertClaimPlans(t, ctx, conn, "grown", true)

	// A lease of rows of two days: the oldest unprocessed rows are in
	// outbox_legacy; with those leased away, the next are in the two
	// partitions ahead. Each claimed row is looked up in its own partition.
	var legacyBacklog int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM outbox_legacy WHERE processed_at IS NULL`).Scan(&legacyBacklog))
	_, err = conn.Exec(ctx, `UPDATE outbox_legacy SET locked_by = 'other', locked_until = now() + interval '1 hour' WHERE processed_at IS NULL`)
	require.NoError(t, err)
	lease, _ := leaseStatement(nil)
	plan := explainPrepared(t, ctx, conn, claimPlan, "ANALYZE, FORMAT JSON", lease, `100, 'relay-t', 60000000`)
	var ahead []string
	rows, err := conn.Query(ctx, `SELECT DISTINCT tableoid::regclass::text FROM outbox WHERE occurred_at > now() + interval '12 hours' ORDER BY 1`)
	require.NoError(t, err)
	ahead, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, ahead, 2)
	got := executedLookups(plan)
	slices.Sort(got)
	assert.Equal(t, ahead, got, "the lease's lookups ran in the partitions of its rows alone (%d partitions, %d rows of outbox_legacy leased elsewhere)",
		len(outboxLeaves(t, ctx, conn)), legacyBacklog)
}
