//go:build deploycheck

package main

// The shipped deploy/ files against a real Prometheus (Debian's
// prometheus binary): `make check-prometheus`, part of `make test`.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/heraldhq/herald/internal/testkit/proctest"
)

// promRewrites are the changes the test makes to the shipped files, each
// of which must be found (a file that changed shape fails the test instead
// of being checked half-way): the compose host names become the test's
// processes, the intervals shrink from 15s to 1s, and the alerts' for and
// thresholds shrink so that stopping the relay fires them within seconds.
var (
	configRewrites = []rewrite{
		{"scrape_interval: 15s", "scrape_interval: 1s"},
		{"evaluation_interval: 15s", "evaluation_interval: 1s"},
	}
	alertRewrites = []rewrite{
		{"max without (instance) (herald_outbox_unprocessed) > 100\n        for: 5m", "max without (instance) (herald_outbox_unprocessed) > 3\n        for: 3s"},
		{"max without (instance) (herald_outbox_oldest_unprocessed_seconds) > 300\n        for: 5m", "max without (instance) (herald_outbox_oldest_unprocessed_seconds) > 3\n        for: 3s"},
		{"up{job=~\"herald-.*\"} == 0\n        for: 2m", "up{job=~\"herald-.*\"} == 0\n        for: 3s"},
		{"for: 10m", "for: 10s"},
	}
)

type rewrite struct{ from, to string }

func applyRewrites(t *testing.T, name, s string, rs []rewrite) string {
	t.Helper()
	for _, r := range rs {
		require.Contains(t, s, r.from, "%s no longer holds %q: update the test's rewrites", name, r.from)
		s = strings.ReplaceAll(s, r.from, r.to)
	}
	return s
}

// promClient queries one Prometheus over its HTTP API.
type promClient struct{ base string }

type promResult struct {
	Status    string          `json:"status"`
	Error     string          `json:"error"`
	ErrorType string          `json:"errorType"`
	Data      json.RawMessage `json:"data"`
}

func (p promClient) get(t *testing.T, path string, q url.Values) promResult {
	t.Helper()
	resp, err := http.Get(p.base + path + "?" + q.Encode())
	require.NoError(t, err)
	defer resp.Body.Close()
	var r promResult
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&r))
	return r
}

// query runs an instant query and returns its vector; a parse or
// evaluation error fails the test.
func (p promClient) query(t *testing.T, expr string) []struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
} {
	t.Helper()
	r := p.get(t, "/api/v1/query", url.Values{"query": {expr}})
	require.Equal(t, "success", r.Status, "query %q: %s %s", expr, r.ErrorType, r.Error)
	var d struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  []any             `json:"value"`
		} `json:"result"`
	}
	require.NoError(t, json.Unmarshal(r.Data, &d))
	require.Equal(t, "vector", d.ResultType, expr)
	return d.Result
}

// dashboardExprs returns every PromQL expression of the Grafana dashboard,
// with its variables set as the dashboard's "All" sets them.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../../deploy/grafana/herald.json")
	require.NoError(t, err)
	var d struct {
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr  string `json:"expr"`
				RefID string `json:"refId"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &d))
	out := map[string]string{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			expr := strings.NewReplacer("$__rate_interval", "1m", "$job", ".*").Replace(tg.Expr)
			out[fmt.Sprintf("panel %d %q %s", p.ID, p.Title, tg.RefID)] = expr
		}
	}
	require.NotEmpty(t, out)
	return out
}

// ruleExprs returns the alert rules of alerts.yml by name.
func ruleExprs(t *testing.T, alerts string) map[string]string {
	t.Helper()
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(alerts), &f))
	out := map[string]string{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out[r.Alert] = r.Expr
		}
	}
	require.NotEmpty(t, out)
	return out
}

// comparison is a threshold of an alert's expression: without them the
// expression returns the series it judges, which must exist.
var comparison = regexp.MustCompile(`\s*(==|!=|>=|<=|>|<)\s*[0-9.]+`)

// Exercise: the shipped Prometheus configuration, rules and dashboard
// against Debian's prometheus scraping a running herald (api, relay and
// worker over PostgreSQL + RabbitMQ, traced): every dashboard query and
// every alert rule parses and returns data, the histograms carry trace
// exemplars, and stopping the relay fires HeraldProcessDown for it, then
// OutboxBacklog and OutboxOldestUnprocessed, with for and thresholds
// shortened (see alertRewrites).
func TestDeployPrometheus(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("HERALD_REQUIRE_SERVICES") == "1" {
			t.Fatal("prometheus not found: scripts/services.sh installs Debian's prometheus package")
		}
		t.Skip("prometheus not found")
	}
	rcv := startOTLPReceiver(t)
	env := rcv.env()
	env["HERALD_MONITOR_INTERVAL"] = "1s"
	env["HERALD_RETRY_DELAY"] = "300ms"
	s := newStack(t, env)
	s.smtp.Greylist(1) // every first attempt is refused for now: retries show in the metrics
	s.startAPI(nil)
	relayAddr, workerAddr := freeAddr(t), freeAddr(t)
	relay := s.startWith(map[string]string{"HERALD_METRICS_ADDR": relayAddr}, "relay")
	s.startWith(map[string]string{"HERALD_METRICS_ADDR": workerAddr}, "worker")
	waitHTTP(t, "http://"+relayAddr+"/metrics")
	waitHTTP(t, "http://"+workerAddr+"/metrics")

	dir := t.TempDir()
	promAddr := freeAddr(t)
	cfgText, err := os.ReadFile("../../deploy/prometheus/prometheus.yml")
	require.NoError(t, err)
	apiAddr := strings.TrimPrefix(s.api.base, "http://")
	cfg := applyRewrites(t, "prometheus.yml", string(cfgText), append(configRewrites,
		rewrite{`["api:8080"]`, `["` + apiAddr + `"]`},
		rewrite{`["relay:9101"]`, `["` + relayAddr + `"]`},
		rewrite{`["worker:9102"]`, `["` + workerAddr + `"]`},
		rewrite{`["localhost:9090"]`, `["` + promAddr + `"]`}))
	alertText, err := os.ReadFile("../../deploy/prometheus/alerts.yml")
	require.NoError(t, err)
	alerts := applyRewrites(t, "alerts.yml", string(alertText), alertRewrites)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "alerts.yml"), []byte(alerts), 0o644))

	prom, err := proctest.Start(proctest.Spec{Bin: bin, Name: "prometheus", Args: []string{
		"--config.file=" + filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + promAddr,
		"--enable-feature=exemplar-storage",
	}})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = prom.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("--- prometheus log ---\n%s", prom.LogTail(40))
		}
	})
	pc := promClient{base: "http://" + promAddr}
	require.NoError(t, proctest.WaitHTTP(context.Background(), pc.base+"/-/ready", 60*time.Second))

	// Every target of the shipped configuration is scraped.
	require.Eventually(t, func() bool {
		up := pc.query(t, `up == 1`)
		return len(up) == 4
	}, 30*time.Second, 200*time.Millisecond, "the four targets (api, relay, worker, prometheus) are up")

	// Load: creates, each delivered on its second attempt.
	const n = 20
	ids := make([]string, n)
	for i := range ids {
		r := s.api.create(t, fmt.Sprintf("prom-%d@example.com", i), nil)
		require.Equal(t, 201, r.Status, r.Body)
		ids[i] = r.ID
	}
	for _, id := range ids {
		s.waitStatus(id, "sent", 60*time.Second)
	}
	require.Eventually(t, func() bool {
		v := pc.query(t, `sum(herald_worker_deliveries_total{outcome="sent"})`)
		return len(v) == 1 && v[0].Value[1] == fmt.Sprint(n)
	}, 30*time.Second, 200*time.Millisecond, "Prometheus scraped the worker's deliveries")

	// Every dashboard query parses and returns data (rate() needs two
	// scrapes after the load, hence the poll).
	for name, expr := range dashboardExprs(t) {
		require.Eventually(t, func() bool { return len(pc.query(t, expr)) > 0 }, 20*time.Second, 250*time.Millisecond,
			"%s: %s returns no data", name, expr)
	}

	// Every alert rule parses and evaluates (the rules API reports each
	// rule's health), and the series it judges exist.
	rules := ruleExprs(t, alerts)
	for name, expr := range rules {
		pc.query(t, expr) // parses and evaluates
		base := comparison.ReplaceAllString(expr, "")
		require.NotEmpty(t, pc.query(t, base), "alert %s: %s (its thresholds removed) returns no data", name, base)
	}
	require.Eventually(t, func() bool {
		r := pc.get(t, "/api/v1/rules", nil)
		var d struct {
			Groups []struct {
				Rules []struct {
					Name, Health, LastError string
				} `json:"rules"`
			} `json:"groups"`
		}
		require.NoError(t, json.Unmarshal(r.Data, &d))
		seen := 0
		for _, g := range d.Groups {
			for _, r := range g.Rules {
				require.NotEqual(t, "err", r.Health, "rule %s: %s", r.Name, r.LastError)
				if r.Health == "ok" {
					seen++
				}
			}
		}
		return seen == len(rules)
	}, 20*time.Second, 250*time.Millisecond, "every rule evaluated")

	// The stage histograms carry exemplars with the trace ids of spans the
	// receiver got.
	for _, metric := range []string{"herald_create_seconds_bucket", "herald_outbox_wait_seconds_bucket", "herald_send_seconds_bucket", "herald_delivery_seconds_bucket", "herald_broker_wait_seconds_bucket"} {
		var traceID string
		require.Eventually(t, func() bool {
			r := pc.get(t, "/api/v1/query_exemplars", url.Values{"query": {metric},
				"start": {fmt.Sprint(time.Now().Add(-10 * time.Minute).Unix())}, "end": {fmt.Sprint(time.Now().Unix())}})
			require.Equal(t, "success", r.Status, r.Error)
			var d []struct {
				Exemplars []struct {
					Labels map[string]string `json:"labels"`
				} `json:"exemplars"`
			}
			require.NoError(t, json.Unmarshal(r.Data, &d))
			for _, series := range d {
				for _, e := range series.Exemplars {
					traceID = e.Labels["trace_id"]
					if traceID != "" && len(rcv.trace(traceID)) > 0 {
						return true
					}
				}
			}
			return false
		}, 20*time.Second, 250*time.Millisecond, "%s has an exemplar naming a trace the receiver holds (last: %q)", metric, traceID)
	}

	// The relay stops: its target goes down and the outbox fills.
	require.NoError(t, relay.Stop(30*time.Second))
	for i := range 5 {
		r := s.api.create(t, fmt.Sprintf("stuck-%d@example.com", i), nil)
		require.Equal(t, 201, r.Status, r.Body)
	}
	firing := func() map[string]bool {
		r := pc.get(t, "/api/v1/alerts", nil)
		var d struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		}
		require.NoError(t, json.Unmarshal(r.Data, &d))
		out := map[string]bool{}
		for _, a := range d.Alerts {
			if a.State == "firing" {
				out[a.Labels["alertname"]+"/"+a.Labels["job"]] = true
			}
		}
		return out
	}
	want := []string{"HeraldProcessDown/herald-relay", "OutboxBacklog/herald-api", "OutboxOldestUnprocessed/herald-api"}
	var got map[string]bool
	require.Eventually(t, func() bool {
		got = firing()
		for _, w := range want {
			if !got[w] {
				return false
			}
		}
		return true
	}, 60*time.Second, 500*time.Millisecond, "with the relay stopped, %v fire (firing: %v)", want, got)
	require.False(t, got["HeraldProcessDown/herald-worker"] || got["HeraldProcessDown/herald-api"], "only the relay is down: %v", got)
}
