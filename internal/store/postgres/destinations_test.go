package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// Migration 0016 gives the pending email and telegram notifications made
// before it their destination (the channel's name), so that the listing
// counts them; a pending webhook keeps none, a settled one is left alone.
func TestDestinationsMigrationBackfill(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := openMigratedBefore(ctx, t, 16)
	_, err := s.pool.Exec(ctx, `INSERT INTO notifications (user_id, channel, recipient, subject, body, status) VALUES
		('u', 'email', 'a@example.com', 's', 'b', 'pending'),
		('u', 'email', 'b@example.com', 's', 'b', 'sent'),
		('u', 'telegram', '@news', '', 'b', 'pending'),
		('u', 'webhook', 'https://hooks.example.com/x', '', '{}', 'pending')`)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))

	rows, err := s.pool.Query(ctx, `SELECT channel || ':' || status || ':' || COALESCE(destination, '-') FROM notifications ORDER BY id`)
	require.NoError(t, err)
	var got []string
	for rows.Next() {
		var v string
		require.NoError(t, rows.Scan(&v))
		got = append(got, v)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"email:pending:email", "email:sent:-", "telegram:pending:telegram", "webhook:pending:-"}, got)

	_, err = s.DestinationFailing(ctx, "email", "email", "refused", time.Now())
	require.NoError(t, err)
	p, err := s.ListDestinations(ctx, notify.DestinationFilter{Limit: 10})
	require.NoError(t, err)
	require.Len(t, p.Items, 1)
	require.EqualValues(t, 1, p.Items[0].Pending)
}

// A page of the destinations listing reads the records by key and counts
// each one's pending notifications from its entries in
// notifications_destination_pending_idx alone: no scan of notifications,
// whose sent rows (most of the table) are not in the index at all, and
// counts only for the page's records.
func TestDestinationListPlan(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s := setup(t)
	_, err := s.pool.Exec(ctx, `
INSERT INTO destinations (key, channel, state, reason, since)
SELECT 'https://d' || i || '.example.com:443', 'webhook', 'failing', 'refused', now() FROM generate_series(1, 500) AS i;
INSERT INTO notifications (user_id, channel, recipient, subject, body, status, destination)
SELECT 'u', 'webhook', 'https://d' || (i % 500) || '.example.com/x', '', '{}',
	CASE WHEN (i / 500) % 10 = 0 THEN 'pending' ELSE 'sent' END, 'https://d' || (i % 500) || '.example.com:443'
FROM generate_series(1, 50000) AS i;
ANALYZE destinations; ANALYZE notifications`)
	require.NoError(t, err)

	var raw []byte
	require.NoError(t, s.pool.QueryRow(ctx, `EXPLAIN (FORMAT JSON, ANALYZE, BUFFERS) `+listDestinations,
		"https://d2", "", 21).Scan(&raw))
	var out []map[string]any
	require.NoError(t, json.Unmarshal(raw, &out))
	// The count reads the index: an index (only) scan of it, or a bitmap
	// of it that visits those rows (an index-only scan once vacuumed).
	var problems, counted []string
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		node, _ := n["Node Type"].(string)
		rel, _ := n["Relation Name"].(string)
		index, _ := n["Index Name"].(string)
		loops, _ := n["Actual Loops"].(float64)
		kids, _ := n["Plans"].([]any)
		switch {
		case index == "notifications_destination_pending_idx":
			counted = append(counted, node)
			if loops > 21 {
				problems = append(problems, fmt.Sprintf("pending counted %v times for a page of 20", loops))
			}
		case rel == "notifications" && node == "Bitmap Heap Scan" && len(kids) == 1 &&
			kids[0].(map[string]any)["Index Name"] == "notifications_destination_pending_idx":
		case rel == "notifications", strings.HasPrefix(node, "Bitmap"):
			problems = append(problems, fmt.Sprintf("%s on %s using %q", node, rel, index))
		case node == "Seq Scan" && rel != "destinations":
			problems = append(problems, "Seq Scan on "+rel)
		}
		for _, k := range kids {
			walk(k.(map[string]any))
		}
	}
	walk(out[0]["Plan"].(map[string]any))
	require.NotEmpty(t, counted, "the count reads notifications_destination_pending_idx")
	require.Empty(t, problems)

	p, err := s.ListDestinations(ctx, notify.DestinationFilter{Limit: 20, After: "https://d2"})
	require.NoError(t, err)
	require.Len(t, p.Items, 20)
	require.Equal(t, "https://d2.example.com:443", p.Items[0].Key)
	require.EqualValues(t, 10, p.Items[0].Pending, "one in ten of its 100 notifications is pending")
}
