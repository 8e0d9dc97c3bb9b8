//go:build figures

package api_test

// Issue 35's figures: what a create that names a template and a user
// (its address and locale looked up, its parts rendered) costs against a
// plain create carrying the same text, and against one that only takes
// its address from the user's recipient, on PostgreSQL, through real HTTP
// (an in-process API on loopback) to a real store in a scratch database.
// Not a test of timings: it fails only when a create fails or writes other
// rows than the two of a notification; it logs the table that
// docs/benchmarks.md ("Templates and recipients") quotes.
//
//	go test -tags figures -run TestTemplateFigures -v -count=1 ./internal/api/
//
// For each number of clients at once in HERALD_FIG_CLIENTS (default
// "1,16"): HERALD_FIG_ROUNDS (default 6) rounds of HERALD_FIG_SECONDS
// (default 3) seconds per kind, the kinds alternating (each goes first in
// turn); then HERALD_FIG_N (default 4000) creates of each kind,
// in two alternating halves, for the rows, relation sizes and WAL.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/store/postgres"
	"github.com/heraldhq/herald/internal/testkit/pgtest"
)

func figEnv(t *testing.T, name string, def int) int {
	t.Helper()
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, name)
		return n
	}
	return def
}

// figUsers is how many recipients the templated creates spread over.
const figUsers = 1000

// figKind is one kind of create: its request for the i-th create.
type figKind struct {
	name string
	body func(i int) []byte
}

// The kinds carry the same subject and text. A plain create gives the
// address; a "recipient" create leaves it to the user's recipient (a
// look-up, and the create's transaction holds a lock on the recipient's
// row); a "template" create also has its parts rendered from the
// template in the recipient's locale, and adds the HTML part the template
// has (a plain create has none).
var figKinds = []figKind{
	{"plain", func(i int) []byte { return figPlain(i, true) }},
	{"recipient", func(i int) []byte { return figPlain(i, false) }},
	{"template", func(i int) []byte {
		name, order := figData(i)
		b, _ := json.Marshal(map[string]any{"user_id": "u-" + strconv.Itoa(i%figUsers), "channel": "email",
			"template": "order_shipped", "data": map[string]any{"name": name, "order": order}})
		return b
	}},
}

func figPlain(i int, to bool) []byte {
	u := i % figUsers
	name, order := figData(i)
	subject, text := "Order "+order+" shipped", "Hi "+name+", order "+order+" is on its way."
	if u%2 == 1 {
		subject, text = "Bestellung "+order+" verschickt", "Hallo "+name+", Bestellung "+order+" ist unterwegs."
	}
	m := map[string]any{"user_id": "u-" + strconv.Itoa(u), "channel": "email", "subject": subject, "body": text}
	if to {
		m["to"] = "user" + strconv.Itoa(u) + "@example.com"
	}
	b, _ := json.Marshal(m)
	return b
}

func figData(i int) (name, order string) {
	return "Ada Lovelace", strconv.Itoa(100000 + i)
}

// figCreate posts one create and fails unless it is answered 201.
func figCreate(ctx context.Context, c *http.Client, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/notifications", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("%d %.300s", resp.StatusCode, raw)
	}
	return nil
}

// figLoad runs clients clients creating kind k until d has passed (when n
// is 0) or n creates are made, and returns the creates made and the time.
func figLoad(t *testing.T, url string, k figKind, clients int, d time.Duration, n int, next *atomic.Int64) (int, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}, Timeout: 30 * time.Second}
	defer c.CloseIdleConnections()
	var claimed, made atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for range clients {
		wg.Go(func() {
			for {
				if n == 0 && time.Now().After(end) {
					return
				}
				if n > 0 && claimed.Add(1) > int64(n) {
					return
				}
				if err := figCreate(ctx, c, url, k.body(int(next.Add(1)))); err != nil {
					failed.Store(err.Error())
					cancel()
					return
				}
				made.Add(1)
			}
		})
	}
	wg.Wait()
	require.Nil(t, failed.Load(), "a %s create failed", k.name)
	return int(made.Load()), time.Since(start)
}

// figCounts are the cumulative figures one span subtracts.
type figCounts struct {
	lsn   string
	rows  map[string]int64 // rows per table (a partition's under its parent)
	bytes map[string]int64 // pg_total_relation_size per table, partitions summed
}

const (
	figRows = `
SELECT COALESCE((SELECT p.relname FROM pg_class AS p WHERE p.oid = pg_partition_root(c.oid)), c.relname)::text,
	c.oid::regclass::text, c.relkind::text, pg_total_relation_size(c.oid)
FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')`

	// figRowBytes is the average size of each kind's notification row and
	// of its event's row: a create whose fields were resolved keeps the
	// digest of its request as given, a templated one its template.
	figRowBytes = `
SELECT CASE WHEN n.template <> '' THEN 'template' WHEN n.request_digest <> '' THEN 'recipient' ELSE 'plain' END,
	avg(pg_column_size(n.*)), avg(pg_column_size(o.*))
FROM notifications AS n JOIN outbox AS o ON (o.payload->>'notification_id')::bigint = n.id AND o.event_type = 'notification.requested'
GROUP BY 1`

	// figWAL sums the WAL records between two positions that are this
	// database's: a record naming one of its blocks, or of a transaction
	// that did (its commit, a multixact). The server's other databases'
	// records (other tests on the machine) are left out.
	figWAL = `
WITH r AS (
	SELECT xid, resource_manager, record_type, record_length, fpi_length,
		block_ref LIKE '%/' || (SELECT oid FROM pg_database WHERE datname = current_database()) || '/%' AS here
	FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)
), mine AS (SELECT DISTINCT xid FROM r WHERE here AND xid <> 0)
SELECT resource_manager || ' ' || split_part(record_type, '+', 1), count(*), sum(record_length)::bigint, sum(fpi_length)::bigint
FROM r WHERE here OR (xid <> 0 AND xid IN (SELECT xid FROM mine))
GROUP BY 1`
)

func figRead(t *testing.T, conn *pgx.Conn) figCounts {
	t.Helper()
	ctx := t.Context()
	c := figCounts{rows: map[string]int64{}, bytes: map[string]int64{}}
	// The flush position: every create answered 201 is committed, its
	// records flushed (synchronous_commit), and pg_walinspect reads no
	// further than it.
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn()::text`).Scan(&c.lsn))
	rows, err := conn.Query(ctx, figRows)
	require.NoError(t, err)
	type rel struct {
		root, name, kind string
		size             int64
	}
	rels, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (rel, error) {
		var x rel
		return x, r.Scan(&x.root, &x.name, &x.kind, &x.size)
	})
	require.NoError(t, err)
	for _, r := range rels {
		c.bytes[r.root] += r.size
		if r.kind == "r" {
			var n int64
			require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM `+r.name).Scan(&n))
			c.rows[r.root] += n
		}
	}
	return c
}

// figSpan is what one kind's creates added.
type figSpan struct {
	creates           int
	rows, bytes       map[string]int64
	walBytes, walFPI  int64
	walRecords        int64
	walByType         map[string]int64
	serverWAL         int64
	walRecordsPerType map[string]int64
}

func (s *figSpan) add(t *testing.T, conn *pgx.Conn, before, after figCounts, creates int) {
	t.Helper()
	ctx := t.Context()
	s.creates += creates
	for k, v := range after.rows {
		if d := v - before.rows[k]; d != 0 {
			s.rows[k] += d
		}
	}
	for k, v := range after.bytes {
		if d := v - before.bytes[k]; d != 0 {
			s.bytes[k] += d
		}
	}
	var server int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::bigint`, before.lsn, after.lsn).Scan(&server))
	s.serverWAL += server
	rows, err := conn.Query(ctx, figWAL, before.lsn, after.lsn)
	require.NoError(t, err)
	for rows.Next() {
		var typ string
		var n, length, fpi int64
		require.NoError(t, rows.Scan(&typ, &n, &length, &fpi))
		s.walBytes += length
		s.walFPI += fpi
		s.walRecords += n
		s.walByType[typ] += length - fpi
		s.walRecordsPerType[typ] += n
	}
	require.NoError(t, rows.Err())
}

func TestTemplateFigures(t *testing.T) {
	rounds := figEnv(t, "HERALD_FIG_ROUNDS", 6)
	seconds := figEnv(t, "HERALD_FIG_SECONDS", 3)
	n := figEnv(t, "HERALD_FIG_N", 4000)
	var clientsList []int
	for _, f := range strings.Split(cmp.Or(os.Getenv("HERALD_FIG_CLIENTS"), "1,16"), ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		require.NoError(t, err, "HERALD_FIG_CLIENTS")
		clientsList = append(clientsList, c)
	}
	ctx := t.Context()
	t.Logf("load average at the start: %s", loadAvg())

	dbURL := pgtest.URL(t)
	st, err := postgres.Open(ctx, dbURL, postgres.Config{})
	require.NoError(t, err)
	defer st.Close()
	// As herald api builds it (cmd/herald/build.go): the store serves
	// recipients, templates and preferences.
	a, err := api.New(st, api.Config{Recipients: st, Templates: st, Preferences: st})
	require.NoError(t, err)
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()

	put := func(path, body string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPut, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Less(t, resp.StatusCode, 300, "%s: %s", path, b)
	}
	put("/templates/order_shipped", `{"channel":"email","subject":"Order {{.order}} shipped","text":"Hi {{.name}}, order {{.order}} is on its way.","html":"<p>Hi {{.name}}, order <b>{{.order}}</b> is on its way.</p>"}`)
	put("/templates/order_shipped", `{"channel":"email","locale":"de","subject":"Bestellung {{.order}} verschickt","text":"Hallo {{.name}}, Bestellung {{.order}} ist unterwegs.","html":"<p>Hallo {{.name}}, Bestellung <b>{{.order}}</b> ist unterwegs.</p>"}`)
	for u := range figUsers {
		locale := "en-GB"
		if u%2 == 1 {
			locale = "de-DE"
		}
		put("/recipients/u-"+strconv.Itoa(u), fmt.Sprintf(`{"email":"user%d@example.com","locale":%q}`, u, locale))
	}
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect`)
	require.NoError(t, err, "pg_walinspect (PostgreSQL 15+, contrib) reads this database's share of the WAL")
	// A temporary slot (dropped with this connection) keeps the WAL from
	// here on: the server's other writers (other tests) can make a
	// checkpoint remove a segment before pg_walinspect reads it.
	_, err = conn.Exec(ctx, `SELECT pg_create_physical_replication_slot('herald_figures_' || pg_backend_pid(), true, true)`)
	require.NoError(t, err, "a temporary replication slot keeps the measured WAL")

	var next atomic.Int64
	// A warm-up of each kind: connections made, plans cached.
	for _, k := range figKinds {
		figLoad(t, srv.URL, k, 16, 0, 500, &next)
	}
	for _, clients := range clientsList {
		figMeasure(t, conn, srv.URL, clients, rounds, seconds, n, &next)
	}

	// The rows themselves, exactly (the relations' sizes above grow by
	// whole pages, and by several at once under concurrent inserts).
	rows, err := conn.Query(ctx, figRowBytes)
	require.NoError(t, err)
	sizes := map[string][2]float64{}
	for rows.Next() {
		var kind string
		var n, o float64
		require.NoError(t, rows.Scan(&kind, &n, &o))
		sizes[kind] = [2]float64{n, o}
	}
	require.NoError(t, rows.Err())
	var tbl strings.Builder
	figHeader(&tbl, "PostgreSQL, average row bytes (pg_column_size)")
	for i, name := range []string{"`notifications`", "`outbox` (its `notification.requested` event)"} {
		fmt.Fprintf(&tbl, "| %s |", name)
		for _, k := range figKinds {
			fmt.Fprintf(&tbl, " %.0f |", sizes[k.name][i])
		}
		for _, k := range figKinds[1:] {
			fmt.Fprintf(&tbl, " %.2f |", sizes[k.name][i]/sizes["plain"][i])
		}
		tbl.WriteString("\n")
	}
	t.Logf("average row bytes, every create of the run:\n%s", tbl.String())
	t.Logf("load average at the end: %s", loadAvg())
}

// figMeasure measures both kinds at one number of clients: creates/s, the
// kinds alternating so that both see the same machine; then rows, sizes
// and WAL of n creates of each kind, in two halves each, alternating,
// read from the database before and after each half.
func figMeasure(t *testing.T, conn *pgx.Conn, url string, clients, rounds, seconds, n int, next *atomic.Int64) {
	t.Helper()
	made := map[string]int{}
	took := map[string]time.Duration{}
	var perRound []string
	for r := range rounds {
		// Each kind goes first in turn.
		order := append(slices.Clone(figKinds[r%len(figKinds):]), figKinds[:r%len(figKinds)]...)
		var parts []string
		for _, k := range order {
			m, d := figLoad(t, url, k, clients, time.Duration(seconds)*time.Second, 0, next)
			made[k.name] += m
			took[k.name] += d
			parts = append(parts, fmt.Sprintf("%s %.0f/s", k.name, float64(m)/d.Seconds()))
		}
		perRound = append(perRound, strings.Join(parts, ", "))
	}
	rate := func(k string) float64 { return float64(made[k]) / took[k].Seconds() }
	t.Logf("%d clients: creates/s per round (%d s each): %s", clients, seconds, strings.Join(perRound, "; "))

	spans := map[string]*figSpan{}
	for _, k := range figKinds {
		spans[k.name] = &figSpan{rows: map[string]int64{}, bytes: map[string]int64{}, walByType: map[string]int64{}, walRecordsPerType: map[string]int64{}}
	}
	for half := range 2 {
		order := slices.Clone(figKinds)
		if half == 1 {
			slices.Reverse(order)
		}
		for _, k := range order {
			before := figRead(t, conn)
			m, _ := figLoad(t, url, k, clients, 0, n/2, next)
			require.Equal(t, n/2, m)
			after := figRead(t, conn)
			spans[k.name].add(t, conn, before, after, m)
		}
	}

	var out strings.Builder
	per := func(v int64, s *figSpan) float64 { return float64(v) / float64(s.creates) }
	plain := spans["plain"]
	// row writes a row of the table: f of each kind's span, then each
	// other kind's f over plain's when ratio.
	row := func(label, format string, ratio bool, f func(k string, s *figSpan) []float64) {
		fmt.Fprintf(&out, "| %s |", label)
		for _, k := range figKinds {
			fmt.Fprintf(&out, " "+format+" |", anys(f(k.name, spans[k.name]))...)
		}
		for _, k := range figKinds[1:] {
			if ratio {
				fmt.Fprintf(&out, " %.2f |", f(k.name, spans[k.name])[0]/f("plain", plain)[0])
			} else {
				out.WriteString(" |")
			}
		}
		out.WriteString("\n")
	}
	figHeader(&out, fmt.Sprintf("PostgreSQL, %d client(s), per create", clients))
	row(fmt.Sprintf("creates/s (%d x %d s each, alternating)", rounds, seconds), "%.0f", true, func(k string, _ *figSpan) []float64 { return []float64{rate(k)} })
	tables := map[string]bool{}
	for _, s := range spans {
		for k := range s.rows {
			tables[k] = true
		}
		for k := range s.bytes {
			tables[k] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(tables)) {
		row(fmt.Sprintf("`%s`: rows, bytes (table, TOAST, indexes)", name), "%.2f, %.0f", false, func(_ string, s *figSpan) []float64 {
			return []float64{per(s.rows[name], s), per(s.bytes[name], s)}
		})
	}
	row("bytes, every table", "%.0f", true, func(_ string, s *figSpan) []float64 { return []float64{per(rowsOf(s.bytes), s)} })
	row("WAL bytes, this database's records (of them full-page images)", "%.0f (%.0f)", true, func(_ string, s *figSpan) []float64 {
		return []float64{per(s.walBytes, s), per(s.walFPI, s)}
	})
	row("WAL bytes without full-page images", "%.0f", true, func(_ string, s *figSpan) []float64 { return []float64{per(s.walBytes-s.walFPI, s)} })
	row("WAL records (of them commits)", "%.2f (%.2f)", false, func(_ string, s *figSpan) []float64 {
		return []float64{per(s.walRecords, s), per(s.walRecordsPerType["Transaction COMMIT"], s)}
	})
	row("WAL bytes, server-wide (other databases' included)", "%.0f", false, func(_ string, s *figSpan) []float64 { return []float64{per(s.serverWAL, s)} })
	t.Logf("%d clients, %d creates of each kind for rows and WAL:\n%s", clients, n, out.String())
	for _, k := range figKinds {
		s := spans[k.name]
		var parts []string
		for _, typ := range slices.Sorted(maps.Keys(s.walByType)) {
			parts = append(parts, fmt.Sprintf("%s %.2f x, %.0f B", typ, per(s.walRecordsPerType[typ], s), per(s.walByType[typ], s)))
		}
		t.Logf("%d clients, %s: WAL records per create by type (bytes without full-page images): %s", clients, k.name, strings.Join(parts, "; "))
	}

	// Each create of every kind wrote one notification and one outbox
	// event, and nothing else.
	for _, k := range figKinds {
		s := spans[k.name]
		require.Equal(t, int64(s.creates), s.rows["notifications"], k.name)
		require.Equal(t, int64(s.creates), s.rows["outbox"], k.name)
		require.Equal(t, 2*int64(s.creates), rowsOf(s.rows), "%s: rows by table %v", k.name, s.rows)
	}
}

// loadAvg is the machine's load average (1, 5 and 15 minutes), as uptime
// prints it.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], ", ")
}

// figHeader writes the head of a table with a column per kind, and one
// per kind but plain for its ratio to plain.
func figHeader(w io.Writer, title string) {
	fmt.Fprintf(w, "| %s |", title)
	for _, k := range figKinds {
		fmt.Fprintf(w, " %s |", k.name)
	}
	for _, k := range figKinds[1:] {
		fmt.Fprintf(w, " %s / plain |", k.name)
	}
	fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---|", 2*len(figKinds)-1))
}

func anys(v []float64) []any {
	out := make([]any, len(v))
	for i, x := range v {
		out[i] = x
	}
	return out
}

func rowsOf(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}
