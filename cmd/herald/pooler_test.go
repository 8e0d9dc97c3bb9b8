package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/smtptest"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// herald through PgBouncer in transaction mode with its defaults (issue
// 36), on the table transport with no direct URL: migrate, then serve,
// whose relay and workers poll; a create is delivered, serve restarts, and
// a create after the restart is delivered too, each email once.
func TestPgBouncerServe(t *testing.T) {
	t.Parallel()
	db := testenv.PostgresURL(t)
	smtp := smtptest.Start(t)
	dir := t.TempDir()
	addr := freeAddr(t)
	env := map[string]string{
		"HERALD_DATABASE_URL":   testenv.PgBouncerURL(t, db),
		"HERALD_SMTP_URL":       smtp.URL(),
		"HERALD_SMTP_FROM":      "herald@example.com",
		"HERALD_HTTP_ADDR":      addr,
		"HERALD_RELAY_INTERVAL": "200ms",
	}
	m := startHerald(t, dir, env, "migrate")
	m.waitExit(60 * time.Second)
	require.NoError(t, m.Err(), "herald migrate through PgBouncer:\n%s", m.Log())

	api := client{base: "http://" + addr}
	deliver := func(to string) {
		t.Helper()
		r := api.create(t, to, nil)
		require.Equal(t, 201, r.Status, r.Body)
		var n notification
		require.Eventually(t, func() bool {
			n = api.get(t, r.ID)
			return n.Status == "sent"
		}, 30*time.Second, 20*time.Millisecond, "notification %s never sent (last: %+v)", r.ID, n)
	}

	serve := startHerald(t, dir, env, "serve")
	waitHTTP(t, api.base+"/readyz")
	serve.requireLog("database behind a pooler and no HERALD_DATABASE_DIRECT_URL")
	deliver("a@example.com")
	require.NoError(t, serve.Stop(30*time.Second))
	require.NoError(t, serve.Err(), "serve stops cleanly:\n%s", serve.Log())

	startHerald(t, dir, env, "serve")
	waitHTTP(t, api.base+"/readyz")
	deliver("b@example.com")
	require.Len(t, smtp.Messages(), 2, "each email once")
	require.Zero(t, count(t, db, `SELECT count(*) FROM outbox WHERE processed_at IS NULL AND event_type = 'notification.requested'`))
}

// The production shape through PgBouncer: api, relay and worker on
// RabbitMQ, the relay and the worker given the direct URL for LISTEN; a
// create is delivered once.
func TestPgBouncerProcesses(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	s.env["HERALD_DATABASE_URL"] = testenv.PgBouncerURL(t, s.db)
	// No polling to fall back on within the test's wait: the relay wakes
	// on the NOTIFY the api sends through the pooler, heard on the direct
	// URL.
	s.env["HERALD_RELAY_INTERVAL"] = "1m"
	direct := map[string]string{"HERALD_DATABASE_DIRECT_URL": s.db}
	s.startAPI(nil)
	relay := s.startWith(direct, "relay")
	s.startWith(direct, "worker")
	relay.requireLog("database behind a pooler: LISTEN and the drop of old outbox partitions use HERALD_DATABASE_DIRECT_URL")
	// The relay's first poll runs at start; a create after its listener
	// connected is found only through the wake-up.
	require.Eventually(t, func() bool {
		return s.count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'herald-listener'`) >= 1
	}, 30*time.Second, 20*time.Millisecond, "the relay listens on the direct URL:\n%s", relay.Log())

	r := s.api.create(t, "c@example.com", nil)
	require.Equal(t, 201, r.Status, r.Body)
	s.waitStatus(r.ID, "sent", 30*time.Second)
	require.Len(t, s.smtp.Messages(), 1)
}
