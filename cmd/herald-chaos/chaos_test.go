//go:build outage

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/proctest"
	"github.com/heraldhq/herald/internal/testenv"
)

// TestChaosShort runs the harness on the table transport and on RabbitMQ
// (a node of the harness's own, which the broker-restart fault stops) with
// 300 notifications, a third of them webhooks, and one of each fault;
// smtp-throttle and smtp-drop (about 35s together) run on the table
// transport only. The mongodb run stays out: its schedule alone takes
// longer than the budget of make test. It is long for a
// test (over two minutes on two busy cores), so it is built only with the
// outage tag and runs in the serialized outage phase.
func TestChaosShort(t *testing.T) {
	pg := testenv.Require(t, testenv.PostgresVar)
	if _, err := proctest.RabbitScripts(); err != nil {
		t.Fatalf("the chaos harness starts a RabbitMQ node of its own: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"--transport", "table,rabbitmq", "--n", "300", "--clients", "8", "--step", "1s", "--drain-timeout", "2m",
		"--skip-faults", "rabbitmq:smtp-throttle,rabbitmq:smtp-drop", "--postgres", pg}, &stdout, &stderr)
	if err != nil {
		t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	require.NoError(t, err)

	// One summary line per transport, in order, every one clean.
	var summaries []string
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		if strings.HasPrefix(line, "chaos: ") {
			summaries = append(summaries, line)
		}
	}
	require.Len(t, summaries, 2, stdout.String())
	t.Logf("summaries:\n%s", strings.Join(summaries, "\n"))
	require.True(t, strings.HasPrefix(summaries[0], "chaos: transport=table accepted=300 delivered=300 lost=0 "), summaries[0])
	require.True(t, strings.HasPrefix(summaries[1], "chaos: transport=rabbitmq accepted=300 delivered=300 lost=0 "), summaries[1])
	// The table's dead letters: 4 poison messages and the 3 notifications
	// of smtp-drop.
	require.Contains(t, summaries[0], " dead=7 faults=15 ")
	require.Contains(t, summaries[1], " dead=4 faults=22 ")
	// Per channel: every third notification is a webhook; none lost.
	for _, s := range summaries {
		require.Regexp(t, ` sigterms=[1-9][0-9]* sigterm_p50_s=[0-9.]+ sigterm_max_s=[0-9.]+`+
			` accepted_email=200 lost_email=0 duplicates_email=[0-9]+ accepted_webhook=100 lost_webhook=0 duplicates_webhook=[0-9]+$`, s)
	}
	// The new faults happened: a purge that took messages, a retry queue
	// deleted, an SMTP hang, a silent broker, a throttling and a dropping
	// SMTP server, a failing webhook receiver.
	for _, f := range []string{"queue-purge", "retry-queue-delete", "smtp-hang", "broker-hang", "broker-restart", "smtp-throttle", "smtp-drop", "webhook-fail"} {
		require.Contains(t, stdout.String(), "  "+f+"  ", "the %s fault is in the report", f)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	require.Equal(t, summaries[1], lines[len(lines)-1], "the summary is the last line")
}
