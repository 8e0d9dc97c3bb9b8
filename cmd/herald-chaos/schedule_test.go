package main

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// stubBroker stands for a run's broker where the schedule is made without
// one running.
type stubBroker struct{ broker }

func (stubBroker) restart(*harness) step { return step{name: "broker-restart"} }

func (stubBroker) cutConns() int { return 0 }

// scheduleOf makes run's schedule as a harness would, with a stub broker,
// and returns the steps' names and the log.
func scheduleOf(run chaosRun, cluster bool) ([]string, string) {
	var log bytes.Buffer
	h := &harness{transport: run.name, run: run, brokerRow: brokerNamed(run.broker), storeRow: storeNamed(run.store), nodes: 1, log: &log}
	if cluster {
		h.cluster = &pgCluster{}
	}
	if h.brokerRow.start != nil {
		h.br = stubBroker{}
		h.relays = []*slot{{name: "relay1"}, {name: "relay2"}}
	}
	h.workers = []*slot{{name: "worker1"}, {name: "worker2"}}
	var names []string
	for _, st := range h.schedule() {
		names = append(names, st.name)
	}
	return names, log.String()
}

// TestSchedules checks every run's schedule against its broker's and its
// store's rows: their own faults in it, the faults they leave out not,
// and each left out logged.
func TestSchedules(t *testing.T) {
	for _, run := range chaosRuns() {
		for _, cluster := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/cluster=%v", run.name, cluster), func(t *testing.T) {
				names, log := scheduleOf(run, cluster)
				b, s := brokerNamed(run.broker), storeNamed(run.store)
				has := func(f string) bool { return slices.Contains(names, f) }
				for _, f := range s.own {
					require.True(t, has(f.name), f.name)
				}
				for _, o := range chaosBrokers {
					for _, f := range o.own {
						require.Equal(t, o.name == b.name, has(f.name), f.name)
						if o.name != b.name && b.start != nil && f.elsewhere != "" {
							require.Contains(t, log, "fault skipped on "+run.name+": "+f.name+" (")
						}
					}
				}
				for _, n := range names {
					require.False(t, leaves(b.leftOut, n) || leaves(s.leftOut, n), "%s is left out", n)
					if b.direct != "" {
						require.NotContains(t, proxyFaults, n)
					}
				}
				for _, l := range append(slices.Clone(b.leftOut), s.leftOut...) {
					require.Contains(t, log, ": "+strings.Join(l.faults, ", ")+" ("+l.why+")\n")
				}
				require.Equal(t, b.start != nil, has("broker-reset") && has("broker-restart") && has("kill-9 relay1"))
				wantFailover := cluster && !leaves(s.leftOut, "pg-failover")
				require.Equal(t, wantFailover, has("pg-failover"))
			})
		}
	}

	// The two schedules of make test's short run, in order.
	names, _ := scheduleOf(runNamed("table"), false)
	require.Equal(t, []string{"pg-latency", "kill-9 worker1", "crash after-send worker2", "pg-terminate", "smtp-4xx", "webhook-fail",
		"smtp-throttle", "poison", "endpoint-blackhole", "crash after-commit worker1", "pg-reset", "duplicates", "channel-outage",
		"smtp-drop", "smtp-hang", "pg-blackhole", "kill-9 worker2"}, names)
	names, log := scheduleOf(runNamed("rabbitmq"), true)
	require.Equal(t, []string{"pg-latency", "kill-9 relay1", "kill-9 worker1", "broker-latency", "crash after-send worker2", "pg-terminate",
		"smtp-4xx", "webhook-fail", "smtp-throttle", "retry-queue-delete", "broker-reset", "poison", "endpoint-blackhole",
		"crash after-commit worker1", "pg-reset", "duplicates", "pg-failover", "channel-outage", "smtp-drop", "broker-blackhole",
		"queue-purge", "broker-restart", "smtp-hang", "broker-hang", "pg-blackhole", "kill-9 relay2", "kill-9 worker2"}, names)
	require.Equal(t, "[rabbitmq    0.00s] fault skipped on rabbitmq: visibility-expiry (SQS only)\n", log)
}

// TestRuns checks the runs --transport names: one per broker, then the
// variants, each on a broker and a store of the tables.
func TestRuns(t *testing.T) {
	runs := chaosRuns()
	require.Len(t, runs, len(chaosBrokers)+len(runVariants))
	for i, b := range chaosBrokers {
		require.Equal(t, b.name, runs[i].name)
	}
	seen := map[string]bool{}
	for _, r := range runs {
		require.False(t, seen[r.name], "run %s twice", r.name)
		seen[r.name] = true
		require.NotPanics(t, func() { brokerNamed(r.broker); storeNamed(r.store) }, r.name)
	}
	require.Equal(t, runNames(true), knownTransports)
	require.NotContains(t, allTransports, "rabbitmq-cluster")
}
