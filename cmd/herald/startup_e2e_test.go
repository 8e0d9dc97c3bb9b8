package main

import (
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/faultproxy"
	"github.com/heraldhq/herald/internal/testkit/testenv"
	"github.com/heraldhq/herald/internal/transport/consume"
	"github.com/heraldhq/herald/internal/transport/rabbitmq"
)

// migratedSQLite returns the URL of a migrated SQLite database in dir.
func migratedSQLite(t *testing.T, dir string) string {
	t.Helper()
	db := "sqlite:" + filepath.Join(dir, "herald.db")
	code, out := runBin(t, dir, map[string]string{"HERALD_DATABASE_URL": db}, "migrate")
	require.Equal(t, 0, code, out)
	return db
}

// A worker whose retry delay disagrees with the retry queue the broker
// holds exits 1 at start, before any event, with the fix; a relay, which
// declares no retry queue (the workers own the schedule), starts whatever
// its HERALD_RETRY_DELAY, and so does a worker that agrees. (One vhost for
// all: making one costs seconds.)
func TestStartupBroker(t *testing.T) {
	t.Parallel()
	broker := testenv.Vhost(t)
	// The topology as other workers declared it: a 1s retry delay.
	require.NoError(t, rabbitmq.DeclareTopology(t.Context(), rabbitmq.Config{URL: broker, Settings: consume.Settings{RetryDelays: []time.Duration{time.Second}}}))
	dir := t.TempDir()
	db := migratedSQLite(t, dir)
	base := map[string]string{"HERALD_DATABASE_URL": db, "HERALD_BROKER_URL": broker, "HERALD_SMTP_URL": "mbox:" + filepath.Join(dir, "mbox")}

	t.Run("worker", func(t *testing.T) {
		t.Parallel()
		code, out := runBin(t, dir, base, "worker") // HERALD_RETRY_DELAY: the default 30s
		require.Equal(t, 1, code, out)
		require.Contains(t, out, `declare queue "notifications.retry"`)
		require.Contains(t, out, "x-message-ttl 1000 (1s)")
		require.Contains(t, out, "start with HERALD_RETRY_DELAY=1s as the other workers do")
		require.NotContains(t, out, "guest:guest")
	})
	t.Run("reachability", func(t *testing.T) {
		t.Parallel()
		testBrokerReachability(t, broker, dir, db)
	})
	for _, tc := range []struct{ name, cmd, delay string }{
		{"relay with the default", "relay", ""}, // unset: 30s
		{"agreeing worker", "worker", "1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"HERALD_RETRY_DELAY": tc.delay}
			for k, v := range base {
				env[k] = v
			}
			p := startHerald(t, dir, env, tc.cmd)
			require.Eventually(t, func() bool { return p.LogContains("broker names declared") }, 30*time.Second, 20*time.Millisecond, p.Log())
			require.True(t, p.Running(), p.Log())
		})
	}
}

// A broker that is unreachable at start, comes back and goes away again
// is logged at each change, by a relay that has not published anything;
// the relay declares its names as soon as the broker answers. Its
// start-up record names the database and the broker host, no secret, and
// none of a worker's settings.
func testBrokerReachability(t *testing.T, vhost, dir, db string) {
	broker, err := url.Parse(vhost)
	require.NoError(t, err)
	proxy, err := faultproxy.New(broker.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	proxy.Blackhole()
	broker.Host = proxy.Addr()

	p := startHerald(t, dir, map[string]string{
		"HERALD_DATABASE_URL":   db,
		"HERALD_BROKER_URL":     broker.String(),
		"HERALD_PROBE_INTERVAL": "200ms",
	}, "relay")
	count := func(s string) int { return strings.Count(p.Log(), s) }
	waitLog := func(s string, n int) {
		t.Helper()
		require.Eventually(t, func() bool { return count(s) >= n }, 30*time.Second, 20*time.Millisecond, "waiting for %d x %q:\n%s", n, s, p.Log())
	}
	waitLog(`msg="broker unreachable"`, 1)
	waitLog(`msg="database reachable"`, 1)
	waitLog(`msg=starting`, 1)

	var start string
	for _, line := range strings.Split(p.Log(), "\n") {
		if strings.Contains(line, "msg=starting") {
			start = line
		}
	}
	require.Contains(t, start, "database=sqlite:"+filepath.Join(dir, "herald.db"))
	require.Contains(t, start, "broker=amqp://"+proxy.Addr()+broker.Path)
	require.Contains(t, start, "HERALD_RELAY_BATCH=100")
	for _, absent := range []string{"prefetch", "PREFETCH", "sender", "SMTP", "guest:guest"} {
		require.NotContains(t, start, absent)
	}

	proxy.Pass()
	waitLog(`msg="broker names declared"`, 1)
	waitLog(`msg="broker reachable again"`, 1)
	proxy.Blackhole()
	proxy.Reset()
	waitLog(`msg="broker unreachable"`, 2)
	require.True(t, p.Running(), p.Log())
	require.Equal(t, 1, count(`msg="database reachable"`), "no change, no record")
}

// A database that goes away and comes back is logged at each change by a
// process that keeps running (a worker on the outbox table, PostgreSQL
// behind a fault proxy).
func TestStartupLogsDatabaseReachability(t *testing.T) {
	t.Parallel()
	pg, err := url.Parse(testenv.PostgresURL(t))
	require.NoError(t, err)
	dir := t.TempDir()
	code, out := runBin(t, dir, map[string]string{"HERALD_DATABASE_URL": pg.String()}, "migrate")
	require.Equal(t, 0, code, out)
	proxy, err := faultproxy.New(pg.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	pg.Host = proxy.Addr()

	p := startHerald(t, dir, map[string]string{
		"HERALD_DATABASE_URL":   pg.String(),
		"HERALD_SMTP_URL":       "mbox:" + filepath.Join(dir, "mbox"),
		"HERALD_PROBE_INTERVAL": "200ms",
	}, "worker")
	waitLog := func(s string, n int) {
		t.Helper()
		require.Eventually(t, func() bool { return strings.Count(p.Log(), s) >= n }, 30*time.Second, 20*time.Millisecond, "waiting for %d x %q:\n%s", n, s, p.Log())
	}
	waitLog(`msg="database reachable" database="postgres://`+proxy.Addr()+pg.Path+"?", 1)
	proxy.Blackhole()
	proxy.Reset()
	waitLog(`msg="database unreachable"`, 1)
	proxy.Pass()
	waitLog(`msg="database reachable again"`, 1)
	require.True(t, p.Running(), p.Log())
	require.NotContains(t, p.Log(), "broker", "no broker, no broker record")
}
