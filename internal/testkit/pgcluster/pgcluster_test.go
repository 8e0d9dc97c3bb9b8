package pgcluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/pgcluster"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// setup starts a primary with a standby (sync or not), both removed when
// the test ends. The package starts servers of its own, so it needs no
// service URL; it runs wherever PostgreSQL's binaries are (or can be
// installed), and skips elsewhere unless services are required.
func setup(t *testing.T, sync bool) (primary, standby *pgcluster.Cluster) {
	t.Helper()
	if _, err := pgcluster.Binaries(); err != nil {
		if os.Getenv(testenv.RequireVar) == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	primary, err := pgcluster.StartPrimary(ctx, pgcluster.Options{})
	require.NoError(t, err)
	t.Cleanup(primary.Close)
	standby, err = pgcluster.StartStandby(ctx, primary, sync)
	require.NoError(t, err)
	t.Cleanup(standby.Close)
	return primary, standby
}

// backendPIDs are the server's processes besides the postmaster (the
// backends, the WAL sender, the background workers).
func backendPIDs(t *testing.T, c *pgcluster.Cluster) []int {
	t.Helper()
	conn := connect(t, c.URL())
	rows, err := conn.Query(context.Background(), "SELECT pid FROM pg_stat_activity")
	require.NoError(t, err)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	require.NotEmpty(t, pids)
	var out []int
	for _, p := range pids {
		out = append(out, int(p))
	}
	return out
}

// alive reports whether process pid runs (a zombie, killed and not yet
// reaped, does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// waitRow polls the standby until it has replayed the row.
func waitRow(t *testing.T, conn *pgx.Conn, id int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		err := conn.QueryRow(context.Background(), "SELECT count(*) FROM t WHERE id = $1", id).Scan(&n)
		if err == nil && n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("row %d not on the standby within 30s (last: n=%d err=%v)", id, n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFailover: a row written on the primary reaches the standby, which
// refuses writes; the primary killed -9, the standby promoted and
// released from waiting for a synchronous standby takes writes, with the
// row still there; a multi-host URL with target_session_attrs=read-write
// finds it.
func TestFailover(t *testing.T) {
	t.Parallel()
	primary, standby := setup(t, true)
	ctx := context.Background()

	p := connect(t, primary.URL())
	_, err := p.Exec(ctx, "CREATE TABLE t (id int PRIMARY KEY)")
	require.NoError(t, err)
	_, err = p.Exec(ctx, "INSERT INTO t VALUES (1)")
	require.NoError(t, err)

	s := connect(t, standby.URL())
	waitRow(t, s, 1)
	_, err = s.Exec(ctx, "INSERT INTO t VALUES (2)")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "25006", pgErr.Code, "a standby is read-only") // read_only_sql_transaction

	multi := pgcluster.MultiHostURL("postgres", primary.Addr(), standby.Addr())
	m := connect(t, multi)
	var port int
	require.NoError(t, m.QueryRow(ctx, "SELECT current_setting('port')::int").Scan(&port))
	require.Equal(t, primary.Port(), port, "the multi-host URL reaches the primary")

	backends := backendPIDs(t, primary)
	require.NoError(t, primary.Kill9())
	require.False(t, primary.Running())
	for _, pid := range backends {
		require.Eventually(t, func() bool { return !alive(pid) }, 2*time.Second, 10*time.Millisecond, "backend %d outlived the kill", pid)
	}
	_, err = pgx.Connect(ctx, primary.URL())
	require.Error(t, err, "the killed primary takes no connection")

	require.NoError(t, standby.Promote(ctx))
	// Promoted, the standby still names the old primary as its
	// synchronous standby: a commit waits.
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = s.Exec(wctx, "INSERT INTO t VALUES (2)")
	cancel()
	require.Error(t, err, "a commit waits for the synchronous standby that is gone")

	require.NoError(t, standby.ReleaseSync(ctx))
	m2 := connect(t, multi)
	_, err = m2.Exec(ctx, "INSERT INTO t VALUES (3)")
	require.NoError(t, err)
	var ids []int
	rows, err := m2.Query(ctx, "SELECT id FROM t ORDER BY id")
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	// Row 2's commit was cancelled while waiting for the standby: its
	// WAL was written locally, so it is there (the client was told
	// nothing either way), as PostgreSQL documents.
	require.Contains(t, ids, 1)
	require.Contains(t, ids, 3)
}

// TestAsyncStandby: an asynchronous standby streams without the primary
// waiting for it, and its promotion needs no release.
func TestAsyncStandby(t *testing.T) {
	t.Parallel()
	primary, standby := setup(t, false)
	ctx := context.Background()
	p := connect(t, primary.URL())
	_, err := p.Exec(ctx, "CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)")
	require.NoError(t, err)
	s := connect(t, standby.URL())
	waitRow(t, s, 1)
	require.NoError(t, primary.Kill9())
	require.NoError(t, standby.Promote(ctx))
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = s.Exec(wctx, "INSERT INTO t VALUES (2)")
	require.NoError(t, err)
}

// TestStopStart: a stopped server keeps its data and starts again on its
// port; Close removes it.
func TestStopStart(t *testing.T) {
	t.Parallel()
	primary, _ := setup(t, false)
	ctx := context.Background()
	p := connect(t, primary.URL())
	_, err := p.Exec(ctx, "CREATE TABLE t (id int); INSERT INTO t VALUES (7)")
	require.NoError(t, err)
	require.NoError(t, primary.Stop())
	require.NoError(t, primary.Start(ctx))
	var n int
	require.NoError(t, connect(t, primary.URL()).QueryRow(ctx, "SELECT id FROM t").Scan(&n))
	require.Equal(t, 7, n)
}

// TestBouncer: a PgBouncer in transaction mode in front of the primary
// passes queries; with the primary gone, a connection through it fails
// quickly instead of hanging.
func TestBouncer(t *testing.T) {
	t.Parallel()
	primary, _ := setup(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := pgcluster.StartBouncer(ctx, primary.Addr())
	require.NoError(t, err)
	t.Cleanup(b.Close)
	url := "postgres://postgres@" + b.Addr() + "/postgres?sslmode=disable&default_query_exec_mode=simple_protocol"
	conn := connect(t, url)
	var port int
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting('port')::int").Scan(&port))
	require.Equal(t, primary.Port(), port)
	conn.Close(ctx)

	require.NoError(t, primary.Kill9())
	began := time.Now()
	err = func() error {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		return c.QueryRow(ctx, "SELECT 1").Scan(&port)
	}()
	require.Error(t, err)
	require.False(t, errors.Is(err, context.DeadlineExceeded), "the bouncer answered: %v", err)
	t.Logf("through the bouncer with its server gone: %v after %s", err, time.Since(began))
}
