package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOptions checks the command line without any service.
func TestOptions(t *testing.T) {
	t.Setenv("HERALD_CHAOS_N", "42")
	t.Setenv("HERALD_CHAOS_TRANSPORTS", "")
	t.Setenv("HERALD_CHAOS_CLUSTER", "")
	o, err := parseOptions(nil, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, 42, o.n)
	require.Equal(t, []string{"table", "rabbitmq", "nats", "kafka", "sqs", "mongodb", "pgbouncer"}, o.transports)
	require.Equal(t, 16, o.clients)
	require.NotZero(t, o.seed)
	require.Equal(t, 5*time.Minute, o.drainTimeout)
	require.Equal(t, 15*time.Minute, o.mongoDrainTimeout, "FerretDB drains slowly")

	o, err = parseOptions([]string{"--transport", "table", "--n", "7", "--seed", "9"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, []string{"table"}, o.transports)
	require.Equal(t, 7, o.n)
	require.EqualValues(t, 9, o.seed)

	o, err = parseOptions([]string{"--drain-timeout", "2m"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, 2*time.Minute, o.mongoDrainTimeout, "an explicit --drain-timeout holds for mongodb too")

	o, err = parseOptions([]string{"--transport", "both"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, []string{"rabbitmq", "table"}, o.transports)

	t.Setenv("HERALD_CHAOS_TRANSPORTS", "kafka, nats")
	o, err = parseOptions(nil, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, []string{"kafka", "nats"}, o.transports)

	t.Setenv("HERALD_CHAOS_CLUSTER", "1")
	o, err = parseOptions([]string{"--transport", "rabbitmq"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, []string{"rabbitmq", "rabbitmq-cluster"}, o.transports)

	for _, bad := range []string{"sns", "", "table,"} {
		_, err = parseOptions([]string{"--transport", bad}, &bytes.Buffer{})
		if bad == "table," {
			require.NoError(t, err, "a trailing comma is harmless")
			continue
		}
		require.Error(t, err, bad)
	}
	_, err = parseOptions([]string{"--n", "0"}, &bytes.Buffer{})
	require.Error(t, err)

	o, err = parseOptions([]string{"--skip-faults", "rabbitmq:smtp-drop, kill-9,"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.True(t, o.skips("rabbitmq", "smtp-drop"))
	require.False(t, o.skips("table", "smtp-drop"))
	require.True(t, o.skips("table", "kill-9 worker1"), "a first word names every fault of its kind")
	require.False(t, o.skips("table", "smtp-throttle"))
	_, err = parseOptions([]string{"--skip-faults", "sns:smtp-drop"}, &bytes.Buffer{})
	require.Error(t, err)
}

// TestDatabaseOptions checks --pg (the database's topology) and --faults
// (the only faults of the schedule).
func TestDatabaseOptions(t *testing.T) {
	t.Setenv("HERALD_CHAOS_PG", "")
	o, err := parseOptions(nil, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, pgSync, o.pg, "a run has a synchronous standby of its own by default")
	require.Empty(t, o.onlyFaults)
	for _, pg := range pgTopologies {
		o, err = parseOptions([]string{"--pg", pg}, &bytes.Buffer{})
		require.NoError(t, err)
		require.Equal(t, pg, o.pg)
	}
	t.Setenv("HERALD_CHAOS_PG", "async")
	o, err = parseOptions(nil, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, pgAsync, o.pg)
	_, err = parseOptions([]string{"--pg", "patroni"}, &bytes.Buffer{})
	require.ErrorContains(t, err, `--pg: want one of shared, sync, async, pgbouncer, got "patroni"`)

	o, err = parseOptions([]string{"--faults", "pg-failover, kill-9"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, []string{"pg-failover", "kill-9"}, o.onlyFaults)
	_, err = parseOptions([]string{"--faults", "pg-failure"}, &bytes.Buffer{})
	require.ErrorContains(t, err, `--faults: unknown fault "pg-failure"`)
}

// TestInsertAfter checks where pg-failover goes in a schedule.
func TestInsertAfter(t *testing.T) {
	names := func(ss []step) []string {
		var out []string
		for _, s := range ss {
			out = append(out, s.name)
		}
		return out
	}
	steps := []step{{name: "a"}, {name: "duplicates"}, {name: "b"}}
	require.Equal(t, []string{"a", "duplicates", "pg-failover", "b"}, names(insertAfter(steps, "duplicates", step{name: "pg-failover"})))
	require.Equal(t, []string{"a", "duplicates", "b"}, names(insertAfter([]step{{name: "a"}, {name: "duplicates"}, {name: "b"}}, "duplicates")))
	require.Equal(t, []string{"a", "x"}, names(insertAfter([]step{{name: "a"}}, "duplicates", step{name: "x"})), "at the end when the step is not there")
}

// TestTermQuantiles checks the SIGTERM figures of the summary line.
func TestTermQuantiles(t *testing.T) {
	p50, longest := termQuantiles(nil)
	require.Zero(t, p50)
	require.Zero(t, longest)
	ts := []termRecord{{took: 3 * time.Second}, {took: time.Second}, {took: 31 * time.Second}, {took: 2 * time.Second}}
	p50, longest = termQuantiles(ts)
	require.Equal(t, 2*time.Second, p50)
	require.Equal(t, 31*time.Second, longest)
}

// TestDropRecipient checks which recipients the sink drops the
// connection on.
func TestDropRecipient(t *testing.T) {
	require.True(t, isDropRecipient("drop-abc-1@example.com"))
	require.True(t, isDropRecipient("<Drop-abc-1@example.com>"))
	require.False(t, isDropRecipient("user7@example.com"))
	require.False(t, isDropRecipient("user-drop-1@example.com"))
}

// --skip-faults names faults the schedule has: a misspelt one is refused
// instead of silently skipping nothing.
func TestSkipFaultsKnown(t *testing.T) {
	t.Setenv("HERALD_CHAOS_TRANSPORTS", "")
	_, err := parseOptions([]string{"--skip-faults", "table:smtp-drop,smtp-throttle,crash after-send"}, &bytes.Buffer{})
	require.NoError(t, err)
	_, err = parseOptions([]string{"--skip-faults", "smtp-trottle"}, &bytes.Buffer{})
	require.ErrorContains(t, err, `unknown fault "smtp-trottle"`)
}

// docs/chaos.md's table of faults lists every fault the schedules are made
// of.
func TestChaosDocListsEveryFault(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "chaos.md"))
	require.NoError(t, err)
	var table []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| `") {
			first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " | ")
			table = append(table, first)
		}
	}
	cells := strings.Join(table, " ")
	for _, f := range knownFaults {
		require.Contains(t, cells, "`"+f, "docs/chaos.md's fault table lacks %s", f)
	}
}
