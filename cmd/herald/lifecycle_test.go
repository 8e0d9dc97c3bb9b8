package main

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// A process on a database that was never migrated exits 1 at start with the
// command that fixes it, and a read-only command never creates the file.
func TestUnmigratedDatabaseRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"outbox", "stats", "--database-url", "sqlite:" + missing}, func(string) string { return "" }, &stdout, &stderr)
	require.ErrorContains(t, err, "herald migrate")
	require.NoFileExists(t, missing)

	empty := filepath.Join(dir, "empty.db")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	for _, cmd := range []string{"api", "worker"} {
		p := startHerald(t, dir, map[string]string{"HERALD_DATABASE_URL": "sqlite:" + empty, "HERALD_HTTP_ADDR": freeAddr(t), "HERALD_SMTP_URL": "mbox:out.mbox"}, cmd)
		p.waitExit(30 * time.Second)
		require.Error(t, p.Err(), cmd)
		require.Contains(t, p.Log(), "database not migrated: run `herald migrate`", cmd)
	}

	pg := testenv.PostgresURL(t)
	p := startHerald(t, dir, map[string]string{"HERALD_DATABASE_URL": pg, "HERALD_BROKER_URL": "amqp://guest:guest@127.0.0.1:1/"}, "relay")
	p.waitExit(30 * time.Second)
	require.Error(t, p.Err())
	require.Contains(t, p.Log(), "database not migrated")
}

// The API's readiness is the store's: with the broker unreachable it stays
// ready (the outbox takes the creates), while a relay's own /readyz says
// the broker is down.
func TestReadinessDuringBrokerOutage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pg := testenv.PostgresURL(t)
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"migrate", "--database-url", pg}, func(string) string { return "" }, &out, &out))
	dead := "amqp://guest:guest@127.0.0.1:1/"

	apiAddr := freeAddr(t)
	startHerald(t, dir, map[string]string{"HERALD_DATABASE_URL": pg, "HERALD_BROKER_URL": dead, "HERALD_HTTP_ADDR": apiAddr}, "api")
	waitHTTP(t, "http://"+apiAddr+"/readyz")
	c := client{base: "http://" + apiAddr}
	require.Equal(t, http.StatusCreated, c.create(t, "ann@example.com", nil).Status)

	opsAddr := freeAddr(t)
	startHerald(t, dir, map[string]string{"HERALD_DATABASE_URL": pg, "HERALD_BROKER_URL": dead, "HERALD_METRICS_ADDR": opsAddr}, "relay")
	waitHTTP(t, "http://"+opsAddr+"/healthz")
	resp, err := http.Get("http://" + opsAddr + "/readyz")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	require.Contains(t, body.String(), "broker")
}

// The workers own the retry schedule (they declare the retry queues, whose
// TTLs it sets): a relay started with another HERALD_RETRY_DELAY than the
// workers' runs and publishes, while a second worker that disagrees with
// the queues fails loudly, naming the setting and both fixes, and exits
// non-zero instead of retrying for ever.
func TestRetryScheduleOwnedByWorkers(t *testing.T) {
	t.Parallel()
	s := newStack(t, map[string]string{"HERALD_RETRY_DELAY": "1s"})
	s.start("worker")
	s.waitTopology()
	s.startAPI(nil)

	relay := s.startWith(map[string]string{"HERALD_RETRY_DELAY": "7s"}, "relay")
	relay.requireLog("broker names declared")
	r := s.api.create(t, "ann@example.com", nil)
	require.Equal(t, http.StatusCreated, r.Status, r.Body)
	s.waitStatus(r.ID, "sent", 30*time.Second)
	require.True(t, relay.Running(), "the relay runs with its own HERALD_RETRY_DELAY:\n%s", relay.Log())

	w := s.startWith(map[string]string{"HERALD_RETRY_DELAY": "7s"}, "worker")
	w.waitExit(60 * time.Second)
	require.Error(t, w.Err(), "a worker that disagrees with the retry queues must exit non-zero")
	// Its start-up check (an ERROR record) or its consumer, whichever
	// declares first, stops it; the process's last words say why either way.
	for _, want := range []string{
		"exists with other settings",
		"the workers own the retry queues",
		"start with HERALD_RETRY_DELAY=1s as the other workers do",
		"rabbitmqctl delete_queue",
	} {
		require.Contains(t, w.Log(), want)
	}
}
