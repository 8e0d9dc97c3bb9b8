//go:build outage

package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/pgcluster"
	"github.com/heraldhq/herald/internal/testkit/proctest"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// TestChaosShort runs the harness on the table transport and on RabbitMQ
// (a node of the harness's own, which the broker-restart fault stops) with
// 300 notifications, a third of them webhooks, and one of each fault;
// smtp-throttle and smtp-drop (about 35s together) run on the table
// transport only; endpoint-blackhole and channel-outage run on both in a
// short form (--outage-span 3s: a 3s baseline, then 3s of fault). Each
// run's scratch database is on the shared PostgreSQL (--pg shared), so
// pg-failover is left out here: TestChaosFailover runs it. The
// mongodb run stays out: its schedule alone takes
// longer than the budget of make test. It is long for a test (about two
// minutes on two busy cores), so it is built only with the outage tag and
// runs as make chaos-short, beside test-go: it stops and restarts only
// services of its own.
//
// The two transports run at once, as parallel subtests: each run has a
// scratch database, an SMTP sink, a webhook receiver and proxies of its
// own (and the RabbitMQ run a node of its own), and the one fault that
// reaches a shared service, pg-terminate, ends only the backends of its
// run's database. Their schedules wait on timers far more than they
// compute, so together they take little more than the longer one alone.
func TestChaosShort(t *testing.T) {
	// Beside TestChaosFailover: a top-level test that is not parallel
	// would run before it, not with it.
	t.Parallel()
	pg := testenv.Require(t, testenv.PostgresVar)
	if _, err := proctest.RabbitScripts(); err != nil {
		t.Fatalf("the chaos harness starts a RabbitMQ node of its own: %v", err)
	}
	for _, tc := range []struct {
		transport string
		// dead and faults are the run's counts; the table's dead letters
		// are its 4 poison messages and the 3 notifications of smtp-drop.
		dead, faults int
		// seen are the newer faults the report must name: a purge that
		// took messages, a retry queue deleted, an SMTP hang, a silent
		// broker, a broker restart, a throttling and a dropping SMTP
		// server, a failing webhook receiver, a black-holed endpoint, a
		// black-holed SMTP server.
		seen []string
	}{
		{"table", 7, 17, []string{"smtp-hang", "smtp-throttle", "smtp-drop", "webhook-fail", "endpoint-blackhole", "channel-outage"}},
		{"rabbitmq", 4, 24, []string{"queue-purge", "retry-queue-delete", "smtp-hang", "broker-hang", "broker-restart", "webhook-fail", "endpoint-blackhole", "channel-outage"}},
	} {
		t.Run(tc.transport, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
			defer cancel()
			var stdout, stderr bytes.Buffer
			err := run(ctx, []string{"--transport", tc.transport, "--n", "300", "--clients", "8", "--step", "1s", "--drain-timeout", "2m", "--outage-span", "3s",
				"--skip-faults", "rabbitmq:smtp-throttle,rabbitmq:smtp-drop", "--postgres", pg, "--pg", "shared"}, &stdout, &stderr)
			if err != nil {
				t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
			}
			require.NoError(t, err)

			// One summary line, clean, and it is the last line.
			var summaries []string
			for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
				if strings.HasPrefix(line, "chaos: ") {
					summaries = append(summaries, line)
				}
			}
			require.Len(t, summaries, 1, stdout.String())
			s := summaries[0]
			t.Logf("summary:\n%s", s)
			require.True(t, strings.HasPrefix(s, "chaos: transport="+tc.transport+" accepted=300 delivered=300 lost=0 "), s)
			require.Contains(t, s, fmt.Sprintf(" dead=%d faults=%d ", tc.dead, tc.faults))
			// Per channel: every third notification is a webhook; none lost.
			require.Regexp(t, ` sigterms=[1-9][0-9]* sigterm_p50_s=[0-9.]+ sigterm_max_s=[0-9.]+`+
				` accepted_email=200 lost_email=0 duplicates_email=[0-9]+ accepted_webhook=100 lost_webhook=0 duplicates_webhook=[0-9]+$`, s)
			for _, f := range tc.seen {
				require.Contains(t, stdout.String(), "  "+f+"  ", "the %s fault is in the report", f)
			}
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			require.Equal(t, s, lines[len(lines)-1], "the summary is the last line")
		})
	}
}

// TestChaosFailover runs the pg-failover fault alone, on the table
// transport, with a small load: the run starts a primary and a
// synchronous standby of its own (about 10s), kills the primary -9 under
// the load and promotes the standby; the processes, given both servers,
// must find it, and nothing may be lost. It is the short form of the
// fault that make chaos runs inside every schedule, on every transport:
// the full schedules stay out of make test, whose budget they would
// stretch, and this keeps the fault's code from rotting. The table
// transport is the one where the failed-over database is also the queue
// (claims, leases and records all cross the failover); a RabbitMQ run
// beside it started a broker node and a second pair of PostgreSQL servers
// of its own, CPU that make test's two cores lack, for what make chaos
// covers. It runs beside TestChaosShort
// (both are parallel), adding little to make chaos-short's time.
func TestChaosFailover(t *testing.T) {
	t.Parallel()
	testenv.Require(t, testenv.PostgresVar)
	if _, err := pgcluster.Binaries(); err != nil {
		t.Fatalf("pg-failover starts PostgreSQL servers of its own: %v", err)
	}
	for _, transport := range []string{"table"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			var stdout, stderr bytes.Buffer
			err := run(ctx, []string{"--transport", transport, "--faults", "pg-failover", "--n", "120", "--clients", "8", "--step", "2s",
				"--drain-timeout", "3m"}, &stdout, &stderr)
			if err != nil {
				t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
			}
			require.NoError(t, err)
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			s := lines[len(lines)-1]
			t.Logf("summary:\n%s", s)
			require.True(t, strings.HasPrefix(s, "chaos: transport="+transport+" accepted=120 delivered=120 lost=0 "), s)
			require.Contains(t, s, " faults=1 ")
			require.Regexp(t, ` pg=sync failover_s=[0-9.]+ failover_refused=[0-9]+$`, s)
			require.Contains(t, stdout.String(), "  pg-failover  primary killed -9, standby promoted at +")
		})
	}
}
