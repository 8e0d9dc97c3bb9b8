package main

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/heraldhq/herald/internal/testkit/smtptest"
)

// otlpSpan is one span as the test's OTLP receiver decoded it.
type otlpSpan struct {
	TraceID, SpanID, ParentID string
	Name                      string
	Role                      string // the resource's herald.role
	Attrs                     map[string]string
	Error                     bool
}

// otlpReceiver is an OTLP/HTTP traces endpoint (protobuf, as herald's
// exporter sends it) that keeps every span it is sent.
type otlpReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []otlpSpan
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var ex collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &ex); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(&ex)
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *otlpReceiver) add(ex *collectortrace.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range ex.GetResourceSpans() {
		role := attrs(rs.GetResource().GetAttributes())["herald.role"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, otlpSpan{
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentID: hex.EncodeToString(s.GetParentSpanId()), Name: s.GetName(), Role: role,
					Attrs: attrs(s.GetAttributes()), Error: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
				})
			}
		}
	}
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = strconv.FormatInt(v.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = strconv.FormatBool(v.BoolValue)
		default:
			m[kv.GetKey()] = fmt.Sprint(v)
		}
	}
	return m
}

// trace returns the spans of one trace received so far.
func (r *otlpReceiver) trace(id string) []otlpSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []otlpSpan
	for _, s := range r.spans {
		if s.TraceID == id {
			out = append(out, s)
		}
	}
	return out
}

func (r *otlpReceiver) all() []otlpSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// traceEnv points a herald process at the receiver, with a short export
// delay so that spans arrive while the test polls.
func (r *otlpReceiver) env() map[string]string {
	return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": r.srv.URL, "OTEL_BSP_SCHEDULE_DELAY": "100"}
}

// spanTree is one trace, indexed for the test's questions.
type spanTree []otlpSpan

func (tr spanTree) named(name string) []otlpSpan {
	var out []otlpSpan
	for _, s := range tr {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func (tr spanTree) children(parent otlpSpan, name string) []otlpSpan {
	var out []otlpSpan
	for _, s := range tr {
		if s.ParentID == parent.SpanID && s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func (tr spanTree) String() string {
	var b strings.Builder
	for _, s := range tr {
		fmt.Fprintf(&b, "  %s %s parent=%s role=%s err=%v %v\n", s.SpanID, s.Name, s.ParentID, s.Role, s.Error, s.Attrs)
	}
	return b.String()
}

// clientTrace is the trace a client's traceparent starts.
const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
)

// checkDeliveryTrace waits for one trace to hold the whole path of a
// notification created under the client's traceparent and delivered on its
// second attempt, and checks its shape: the client's span is the parent of
// the API's; the create under it; the delivery's spans (through the relay's
// publish when there is a relay) under the create; two process spans, the
// first failed, the second sent, each with claim, send email and record.
func checkDeliveryTrace(t *testing.T, rcv *otlpReceiver, viaRelay bool, secret ...string) spanTree {
	t.Helper()
	var tr spanTree
	complete := func() bool {
		tr = rcv.trace(clientTraceID)
		sent := 0
		for _, s := range tr.named("process notification.requested") {
			if s.Attrs["herald.outcome"] == "sent" {
				sent++
			}
		}
		return sent == 1 && len(tr.named("record")) >= 2
	}
	require.Eventually(t, complete, 30*time.Second, 50*time.Millisecond, "the trace never held the delivery; spans so far:\n%s", spanTree(rcv.all()))

	server := tr.named("POST /notifications")
	require.Len(t, server, 1, tr)
	require.Equal(t, clientSpanID, server[0].ParentID, "the client's traceparent is the API span's parent")
	require.Equal(t, "201", server[0].Attrs["http.response.status_code"])
	creates := tr.children(server[0], "create notification")
	require.Len(t, creates, 1, tr)
	create := creates[0]

	parent := create
	if viaRelay {
		pubs := tr.children(create, "publish notification.requested")
		require.Len(t, pubs, 1, "the relay's publish is a child of the create:\n%s", tr)
		require.Equal(t, "relay", pubs[0].Role)
		parent = pubs[0]
	}
	procs := tr.children(parent, "process notification.requested")
	require.Len(t, procs, 2, "two deliveries (the first failed, its retry sent), both children of the %s span:\n%s", map[bool]string{true: "publish", false: "create"}[viaRelay], tr)
	slices.SortFunc(procs, func(a, b otlpSpan) int {
		return strings.Compare(a.Attrs["herald.retry_count"], b.Attrs["herald.retry_count"])
	})
	require.Equal(t, "0", procs[0].Attrs["herald.retry_count"])
	require.Equal(t, "retried", procs[0].Attrs["herald.outcome"])
	require.Equal(t, "1", procs[1].Attrs["herald.retry_count"])
	require.Equal(t, "sent", procs[1].Attrs["herald.outcome"])
	for i, p := range procs {
		require.Len(t, tr.children(p, "claim"), 1, "delivery %d has a claim span:\n%s", i, tr)
		sends := tr.children(p, "send email")
		require.Len(t, sends, 1, "delivery %d has a send span:\n%s", i, tr)
		require.Equal(t, i == 0, sends[0].Error, "the first send failed, the second did not")
		require.Len(t, tr.children(p, "record"), 1, "delivery %d has a record span:\n%s", i, tr)
	}
	for _, s := range rcv.all() {
		for k, v := range s.Attrs {
			for _, x := range secret {
				require.NotContains(t, v, x, "span %s attribute %s holds a body or an address", s.Name, k)
			}
		}
	}
	return tr
}

// One trace from the POST to the SMTP send over PostgreSQL and RabbitMQ,
// with real api, relay and worker processes; the first send is refused
// (451, greylisting), and its retry, a copy carrying the traceparent, joins
// the same trace. The worker's log records of the trace carry its id.
func TestTraceFromPostToSendRabbitMQ(t *testing.T) {
	t.Parallel()
	rcv := startOTLPReceiver(t)
	env := rcv.env()
	env["HERALD_RETRY_DELAY"] = "500ms"
	s := newStack(t, env)
	s.smtp.Greylist(1)
	s.startAPI(nil)
	relayMetrics, workerMetrics := freeAddr(t), freeAddr(t)
	s.startWith(map[string]string{"HERALD_METRICS_ADDR": relayMetrics}, "relay")
	w := s.startWith(map[string]string{"HERALD_METRICS_ADDR": workerMetrics}, "worker")

	r := s.api.create(t, "trace-rabbit@example.com", map[string]string{"traceparent": "00-" + clientTraceID + "-" + clientSpanID + "-01"})
	require.Equal(t, 201, r.Status, r.Body)
	n := s.waitStatus(r.ID, "sent", 30*time.Second)
	require.Equal(t, 2, n.Attempts)

	tr := checkDeliveryTrace(t, rcv, true, "trace-rabbit@example.com", "Line one")
	require.Equal(t, documentedMetrics(t), servedMetrics(t, s.api.base+"/metrics", "http://"+relayMetrics+"/metrics", "http://"+workerMetrics+"/metrics"),
		"docs/operations.md's metric table lists what api, relay and worker serve")
	// A create without an idempotency key is one statement (WITH ...
	// INSERT the notification, INSERT its event).
	require.NotEmpty(t, tr.children(tr.named("create notification")[0], "WITH"), "the create's statement is a span (pgx's tracer hook):\n%s", tr)
	require.Eventually(t, func() bool {
		return strings.Contains(w.Log(), "retry scheduled") && strings.Contains(w.Log(), "trace_id="+clientTraceID)
	}, 10*time.Second, 20*time.Millisecond, "the worker's log record of the retry carries the trace id:\n%s", w.Log())
}

// documentedMetrics are the metric names of docs/operations.md's metric
// table.
func documentedMetrics(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		// A row whose processes say "(with SETTING)" is served only with
		// that setting, which this stack does not use (its meaning may
		// say "with" too).
		if m := metricRow.FindStringSubmatch(line); m != nil && !strings.Contains(mdCells(line)[1], "(with `") {
			names = append(names, m[1])
		}
	}
	slices.Sort(names)
	return names
}

var metricRow = regexp.MustCompile("^\\| `(herald_[a-z_]+)[`{]")

// servedMetrics are the herald_* metric families the /metrics endpoints at
// urls serve.
func servedMetrics(t *testing.T, urls ...string) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, u := range urls {
		resp, err := http.Get(u)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" && strings.HasPrefix(f[2], "herald_") {
				seen[f[2]] = true
			}
		}
	}
	names := slices.Sorted(maps.Keys(seen))
	return names
}

// The same trace in the embedded shape: herald serve on SQLite with the
// outbox table as transport (no relay: the worker reads the traceparent
// from the row, and its deliveries are children of the create).
func TestTraceFromPostToSendTable(t *testing.T) {
	t.Parallel()
	rcv := startOTLPReceiver(t)
	smtp := smtptest.Start(t)
	smtp.Greylist(1)
	dir := t.TempDir()
	addr := freeAddr(t)
	env := rcv.env()
	for k, v := range map[string]string{
		"HERALD_HTTP_ADDR":      addr,
		"HERALD_DATABASE_URL":   "sqlite:" + filepath.Join(dir, "herald.db"),
		"HERALD_SMTP_URL":       smtp.URL(),
		"HERALD_SMTP_FROM":      "herald@example.com",
		"HERALD_RETRY_DELAY":    "500ms",
		"HERALD_LOG_FORMAT":     "json",
		"HERALD_RELAY_INTERVAL": "100ms",
	} {
		env[k] = v
	}
	p := startHerald(t, dir, env, "serve")
	api := client{base: "http://" + addr}
	waitHTTP(t, api.base+"/healthz")

	r := api.create(t, "trace-table@example.com", map[string]string{"traceparent": "00-" + clientTraceID + "-" + clientSpanID + "-01"})
	require.Equal(t, 201, r.Status, r.Body)
	require.Eventually(t, func() bool { return api.get(t, r.ID).Status == "sent" }, 30*time.Second, 20*time.Millisecond)

	checkDeliveryTrace(t, rcv, false, "trace-table@example.com", "Line one")
	require.Eventually(t, func() bool {
		return bytes.Contains([]byte(p.Log()), []byte(`"trace_id":"`+clientTraceID+`"`))
	}, 10*time.Second, 20*time.Millisecond, "the JSON log records of the trace carry its id:\n%s", p.Log())
}
