package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/smtptest"
)

// The end-to-end scenarios of issue 35 run on both of herald's shapes
// (design: "Two shapes, one code base"): the embedded default, herald
// serve on SQLite with the outbox table, and the production shape, herald
// api, relay and worker as separate processes on PostgreSQL (a database of
// the test's own) and RabbitMQ (a vhost of its own). A scenario sees only
// the API, the SMTP server and the database, so the same function runs on
// both.

// shape starts herald in one shape, with env over the shape's defaults
// (a HERALD_HTTP_ADDR in env is the API's address), and returns it once
// the API answers.
type shape struct {
	name  string
	start func(t *testing.T, env map[string]string) *running
}

// shapes are the shapes a scenario of onEachShape runs on.
var shapes = []shape{
	{name: "embedded", start: startEmbedded},
	{name: "postgres+rabbitmq", start: startProduction},
}

// running is a started herald as a scenario sees it.
type running struct {
	// base is the API's base URL.
	base string
	smtp *smtptest.Server
	// dbURL is HERALD_DATABASE_URL, valid in dir (SQLite's path is
	// relative to it).
	dbURL string
	dir   string
}

// onEachShape runs scenario once per shape, the shapes in parallel.
func onEachShape(t *testing.T, scenario func(t *testing.T, sh shape)) {
	t.Parallel()
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			t.Parallel()
			scenario(t, sh)
		})
	}
}

func startEmbedded(t *testing.T, env map[string]string) *running {
	t.Helper()
	base, smtp, dir := serveEmbedded(t, env)
	return &running{base: base, smtp: smtp, dbURL: "sqlite:herald.db", dir: dir}
}

// startProduction runs herald api, relay and worker, each its own process,
// on the stack of newStack.
func startProduction(t *testing.T, env map[string]string) *running {
	t.Helper()
	all := map[string]string{"HERALD_HTTP_ADDR": freeAddr(t)}
	maps.Copy(all, env)
	s := newStack(t, all)
	s.start("api")
	s.start("relay")
	s.start("worker")
	base := "http://" + all["HERALD_HTTP_ADDR"]
	waitHTTP(t, base+"/healthz")
	return &running{base: base, smtp: s.smtp, dbURL: s.db, dir: s.dir}
}

// herald runs a herald command on the shape's database, as an operator
// would beside the running processes, and returns its output.
func (r *running) herald(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), heraldBin(t), args...)
	cmd.Dir = r.dir
	cmd.Env = []string{"HERALD_DATABASE_URL=" + r.dbURL}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "herald %v: %s", args, out)
	return string(out)
}

// holding names, for each of needles, every table of the database with a
// row whose text (every column, JSON payloads included) holds it,
// case-insensitively, with the number of such rows: what an erasure must
// leave empty, read from the database itself rather than through the API.
func (r *running) holding(t *testing.T, needles ...string) map[string]map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	found := map[string]map[string]int{}
	for _, n := range needles {
		found[n] = map[string]int{}
	}
	if path, ok := strings.CutPrefix(r.dbURL, "sqlite:"); ok {
		db, err := sql.Open("sqlite", "file:"+filepath.Join(r.dir, path)+"?mode=ro&_pragma=busy_timeout(5000)")
		require.NoError(t, err)
		defer db.Close()
		rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table'`)
		require.NoError(t, err)
		var tables []string
		for rows.Next() {
			var name string
			require.NoError(t, rows.Scan(&name))
			tables = append(tables, name)
		}
		require.NoError(t, rows.Err())
		require.NotEmpty(t, tables)
		for _, table := range tables {
			sqliteRowsHolding(t, ctx, db, table, found)
		}
		return found
	}
	conn, err := pgx.Connect(ctx, r.dbURL)
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(ctx))
	// Every table and partition of herald's schema (a partition's rows
	// are counted under it and again under its parent).
	rows, err := conn.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = current_schema()`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NotEmpty(t, tables)
	for _, table := range tables {
		q := fmt.Sprintf(`SELECT n, count(*)::int FROM %s AS r, unnest($1::text[]) AS n
WHERE strpos(lower(r::text), lower(n)) > 0 GROUP BY n`, pgx.Identifier{table}.Sanitize())
		rows, err := conn.Query(ctx, q, needles)
		require.NoError(t, err, table)
		for rows.Next() {
			var n string
			var c int
			require.NoError(t, rows.Scan(&n, &c))
			found[n][table] = c
		}
		require.NoError(t, rows.Err(), table)
	}
	return found
}

// sqliteRowsHolding adds to found[needle][table] the rows of table with a
// column whose text holds the needle, case-insensitively.
func sqliteRowsHolding(t *testing.T, ctx context.Context, db *sql.DB, table string, found map[string]map[string]int) {
	t.Helper()
	rows, err := db.QueryContext(ctx, `SELECT * FROM "`+strings.ReplaceAll(table, `"`, `""`)+`"`)
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		require.NoError(t, rows.Scan(ptrs...))
		var text strings.Builder
		for _, v := range vals {
			switch v := v.(type) {
			case []byte:
				text.Write(v)
			case nil:
			default:
				fmt.Fprint(&text, v)
			}
			text.WriteByte(0)
		}
		row := strings.ToLower(text.String())
		for n := range found {
			if strings.Contains(row, strings.ToLower(n)) {
				found[n][table]++
			}
		}
	}
	require.NoError(t, rows.Err())
}

// call sends a JSON request to the API at base and returns the decoded
// answer, failing the test on any status from 300 up.
func call(t *testing.T, base, method, path, body string) map[string]any {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Less(t, resp.StatusCode, 300, "%s %s: %s", method, path, b)
	var out map[string]any
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}
