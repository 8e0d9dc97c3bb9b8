package api_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"maps"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/deadletter"
	"github.com/heraldhq/herald/internal/notify"
)

// docURL is where the test's schema compiler keeps the document.
const docURL = "mem://herald/openapi.json"

// spec is the OpenAPI document, read as JSON, with a schema compiler over
// it and a mux of its path templates to find the operation of a request.
type spec struct {
	doc      map[string]any
	compiler *jsonschema.Compiler
	mux      *http.ServeMux

	mu      sync.Mutex
	schemas map[string]*jsonschema.Schema
	// seen records "operationId status" for every reply checked.
	seen map[string]bool
}

func loadSpec(t testing.TB) *spec {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(api.OpenAPIDocument))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.AssertFormat()  // date-time is checked, not just annotated
	c.AssertContent() // so is a string that must hold JSON (contentMediaType)
	require.NoError(t, c.AddResource(docURL, doc))
	s := &spec{doc: doc.(map[string]any), compiler: c, mux: http.NewServeMux(), schemas: map[string]*jsonschema.Schema{}, seen: map[string]bool{}}
	require.Equal(t, "3.1.0", s.doc["openapi"])
	for _, op := range s.operations(t) {
		s.mux.HandleFunc(op, func(http.ResponseWriter, *http.Request) {})
	}
	return s
}

func obj(t testing.TB, v any, what string) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	require.True(t, ok, "%s is not an object", what)
	return m
}

// operations returns "METHOD /path" of every operation, sorted.
func (s *spec) operations(t testing.TB) []string {
	var out []string
	for path, item := range obj(t, s.doc["paths"], "paths") {
		for method := range obj(t, item, path) {
			out = append(out, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(out)
	return out
}

// operation returns an operation's object and its JSON pointer.
func (s *spec) operation(t testing.TB, pattern string) (map[string]any, string) {
	method, path, _ := strings.Cut(pattern, " ")
	m := strings.ToLower(method)
	op := obj(t, obj(t, obj(t, s.doc["paths"], "paths")[path], path)[m], pattern)
	return op, "/paths/" + pointerToken(path) + "/" + m
}

func pointerToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// resolve follows a local $ref of the document.
func (s *spec) resolve(t testing.TB, v map[string]any, ptr string) (map[string]any, string) {
	ref, ok := v["$ref"].(string)
	if !ok {
		return v, ptr
	}
	require.True(t, strings.HasPrefix(ref, "#/"), "only local references: %s", ref)
	var cur any = s.doc
	for _, tok := range strings.Split(ref[2:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		cur = obj(t, cur, ref)[tok]
	}
	return obj(t, cur, ref), ref[1:]
}

func (s *spec) schema(t testing.TB, ptr string) *jsonschema.Schema {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sch, ok := s.schemas[ptr]; ok {
		return sch
	}
	sch, err := s.compiler.Compile(docURL + "#" + ptr)
	require.NoError(t, err, "compile %s", ptr)
	s.schemas[ptr] = sch
	return sch
}

// check validates a real reply against the document: the request must
// match an operation, the status must be one of its documented responses,
// the Content-Type one of that response's, and the body must satisfy the
// schema.
func (s *spec) check(t testing.TB, method, target string, r reply) {
	t.Helper()
	_, pattern := s.mux.Handler(httptest.NewRequest(method, target, nil))
	require.NotEmpty(t, pattern, "%s %s matches no operation of the document", method, target)
	op, ptr := s.operation(t, pattern)
	status := strconv.Itoa(r.status)
	resp, ok := obj(t, op["responses"], pattern+" responses")[status]
	require.True(t, ok, "%s answered %s, which the document does not list: %s", pattern, status, r.raw)
	res, ptr := s.resolve(t, obj(t, resp, status), ptr+"/responses/"+status)
	// The headers the document lists that every such reply carries.
	headers, _ := res["headers"].(map[string]any)
	for name := range headers {
		if name == "WWW-Authenticate" || name == "Retry-After" || name == "Location" {
			require.NotEmpty(t, r.header.Get(name), "%s %s: header %s", pattern, status, name)
		}
	}
	if _, has := res["content"]; !has && r.status == http.StatusNoContent {
		require.Empty(t, r.raw, "%s %s has no body", pattern, status)
		s.mu.Lock()
		s.seen[op["operationId"].(string)+" "+status] = true
		s.mu.Unlock()
		return
	}
	mt, _, err := mime.ParseMediaType(r.header.Get("Content-Type"))
	require.NoError(t, err)
	content := obj(t, res["content"], pattern+" "+status+" content")
	_, ok = content[mt]
	require.True(t, ok, "%s %s: Content-Type %s is not documented", pattern, status, mt)
	sch := s.schema(t, ptr+"/content/"+pointerToken(mt)+"/schema")
	var inst any = r.raw
	if mt == "application/json" {
		inst, err = jsonschema.UnmarshalJSON(strings.NewReader(r.raw))
		require.NoError(t, err)
	}
	require.NoError(t, sch.Validate(inst), "%s %s: the reply does not match the schema: %s", pattern, status, r.raw)
	s.mu.Lock()
	s.seen[op["operationId"].(string)+" "+status] = true
	s.mu.Unlock()
}

// The document and the router agree: every registered route is an
// operation of the document and every operation is registered (with every
// optional part configured); GET routes also answer HEAD, as ServeMux does.
// The operations marked "security: []" are exactly those open without the
// token.
func TestOpenAPIMatchesRouter(t *testing.T) {
	t.Parallel()
	s := loadSpec(t)
	st := setup(t, api.Config{}).store
	const token = "t0ken"
	a, err := api.New(st, api.Config{
		Token:        token,
		Metrics:      promhttp.HandlerFor(prometheus.NewRegistry(), promhttp.HandlerOpts{}),
		DeadLetters:  deadletter.New(st, nil),
		Destinations: st,
		Status:       statusOf(t, st, time.Minute, fixedQueues{}),
		Recipients:   st,
		Templates:    st,
		Preferences:  st,
	})
	require.NoError(t, err)
	require.Equal(t, s.operations(t), a.Routes(), "the router serves exactly the document's operations")

	bare, err := api.New(st, api.Config{})
	require.NoError(t, err)
	require.NotContains(t, bare.Routes(), "GET /metrics", "an optional route is served only when configured")
	require.NotContains(t, bare.Routes(), "GET /dead-letters")
	require.NotContains(t, bare.Routes(), "GET /destinations")

	for _, pattern := range a.Routes() {
		method, path, _ := strings.Cut(pattern, " ")
		op, _ := s.operation(t, pattern)
		sec, hasSec := op["security"].([]any)
		open := hasSec && len(sec) == 0
		target := strings.ReplaceAll(path, "{id}", "1")
		w := httptest.NewRecorder()
		a.Handler().ServeHTTP(w, httptest.NewRequest(method, "http://localhost"+target, strings.NewReader("{}")))
		if open {
			require.NotEqual(t, http.StatusUnauthorized, w.Code, "%s is open in the document", pattern)
		} else {
			require.Equal(t, http.StatusUnauthorized, w.Code, "%s needs the token in the document", pattern)
		}
		require.NotEqual(t, http.StatusMethodNotAllowed, w.Code, pattern)
		if !strings.Contains(path, "{") {
			require.NotEqual(t, http.StatusNotFound, w.Code, pattern)
		}
	}

	// The document is served as it is embedded.
	w := httptest.NewRecorder()
	a.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/openapi.json", nil))
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, "application/json", w.Header().Get("Content-Type"))
	require.JSONEq(t, string(api.OpenAPIDocument), w.Body.String())

	// Every schema and response the document names compiles: no dangling
	// reference.
	for name := range obj(t, obj(t, s.doc["components"], "components")["schemas"], "schemas") {
		s.schema(t, "/components/schemas/"+name)
	}
}

// Real replies of every operation, successes and errors, match the
// document's schemas.
func TestOpenAPIResponses(t *testing.T) {
	t.Parallel()
	s := loadSpec(t)
	var shed bool
	var shedMu sync.Mutex
	failing := pingFunc(func(context.Context) error { return errors.New("down") })
	e := setup(t, api.Config{})
	a, err := api.New(e.store, api.Config{
		Metrics:            promhttp.HandlerFor(prometheus.NewRegistry(), promhttp.HandlerOpts{}),
		DeadLetters:        deadletter.New(e.store, nil),
		Destinations:       e.store,
		Status:             statusOf(t, e.store, time.Minute, fixedQueues{}),
		Recipients:         e.store,
		Templates:          e.store,
		Preferences:        e.store,
		RequiredCategories: []string{"security"},
		LinkSecret:         []byte("0123456789abcdef0123456789abcdef"),
		Ready:              []api.Check{{Name: "store", Pinger: e.store}},
		Channels:           notify.Channels{notify.ChannelEmail: notify.EmailSpec, "webhook": hookSpec},
		KnownChannels: notify.Channels{notify.ChannelEmail: notify.EmailSpec, "webhook": hookSpec,
			"telegram": {To: "a chat id or @channel", RecipientField: "telegram_chat_id"}},
		Admission: func(context.Context) error {
			shedMu.Lock()
			defer shedMu.Unlock()
			if shed {
				return &api.RetryAfterError{After: 2 * time.Second}
			}
			return nil
		},
	})
	require.NoError(t, err)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	call := func(method, target string, headers map[string][]string, body string) reply {
		t.Helper()
		r := do(t, method, srv.URL+target, headers, body)
		s.check(t, method, target, r)
		return r
	}

	// Creates: 201, replay, 409, 400, 413, 415, 429.
	created := call("POST", "/notifications", jsonHeaders("Idempotency-Key", "k1"), body(t, nil))
	require.Equal(t, 201, created.status)
	id := created.json["id"].(string)
	require.Equal(t, 201, call("POST", "/notifications", jsonHeaders("Idempotency-Key", "k1"), body(t, nil)).status)
	require.Equal(t, 409, call("POST", "/notifications", jsonHeaders("Idempotency-Key", "k1"), body(t, map[string]any{"subject": "other"})).status)
	require.Equal(t, 400, call("POST", "/notifications", jsonHeaders(), body(t, map[string]any{"to": "nobody"})).status)
	require.Equal(t, 413, call("POST", "/notifications", jsonHeaders(), strings.Repeat("x", api.DefaultMaxBodyBytes+1)).status)
	require.Equal(t, 415, call("POST", "/notifications", map[string][]string{"Content-Type": {"text/plain"}}, body(t, nil)).status)
	shedMu.Lock()
	shed = true
	shedMu.Unlock()
	require.Equal(t, 429, call("POST", "/notifications", jsonHeaders(), body(t, nil)).status)
	shedMu.Lock()
	shed = false
	shedMu.Unlock()
	for i := range 3 {
		require.Equal(t, 201, call("POST", "/notifications", jsonHeaders(), body(t, map[string]any{"user_id": "u-" + strconv.Itoa(i)})).status)
	}

	// Batches: 207 with created, replayed, conflicting and invalid items;
	// 400, 413, 415 and 429 for the whole request.
	batch := call("POST", "/notifications/batch", jsonHeaders(), `{"notifications":[`+body(t, nil)+`,`+body(t, map[string]any{"to": "nobody"})+
		`,{"user_id":"u-9","channel":"email","to":"a@example.com","subject":"s","body":"b","idempotency_key":"b1"},{"user_id":"u-9","channel":"email","to":"a@example.com","subject":"s","body":"b","idempotency_key":"b1"},{"user_id":"u-9","channel":"email","to":"a@example.com","subject":"x","body":"b","idempotency_key":"b1"}]}`)
	require.Equal(t, 207, batch.status)
	require.Len(t, batch.json["results"], 5)
	require.Equal(t, 400, call("POST", "/notifications/batch", jsonHeaders(), `{"notifications":[]}`).status)
	require.Equal(t, 413, call("POST", "/notifications/batch", jsonHeaders(), `{"notifications":[`+strings.Repeat(`{},`, notify.MaxBatch)+`{}]}`).status)
	require.Equal(t, 415, call("POST", "/notifications/batch", nil, `{"notifications":[{}]}`).status)
	shedMu.Lock()
	shed = true
	shedMu.Unlock()
	require.Equal(t, 429, call("POST", "/notifications/batch", jsonHeaders(), `{"notifications":[`+body(t, nil)+`]}`).status)
	shedMu.Lock()
	shed = false
	shedMu.Unlock()

	// Another channel: its create, detail and listing answer the same
	// shapes; an unknown channel is a 400.
	hook := call("POST", "/notifications", jsonHeaders(), `{"user_id":"u","channel":"webhook","to":"https://example.com/hook","body":{"event":"paid"}}`)
	require.Equal(t, 201, hook.status)
	require.Equal(t, 200, call("GET", "/notifications/"+hook.json["id"].(string), nil, "").status)
	require.Equal(t, 200, call("GET", "/notifications?channel=webhook", nil, "").status)
	require.Equal(t, 400, call("GET", "/notifications?channel=sms", nil, "").status)
	require.Equal(t, 400, call("POST", "/notifications", jsonHeaders(), body(t, map[string]any{"channel": "sms"})).status)

	// Reads and listings.
	require.Equal(t, 200, call("GET", "/notifications/"+id, nil, "").status)
	require.Equal(t, 404, call("GET", "/notifications/999", nil, "").status)
	page := call("GET", "/notifications?limit=2", nil, "")
	require.Equal(t, 200, page.status)
	next := page.json["next_cursor"].(string)
	require.Equal(t, 200, call("GET", "/notifications?limit=2&cursor="+url.QueryEscape(next), nil, "").status)
	require.Equal(t, 400, call("GET", "/notifications?limit=501", nil, "").status)
	require.Equal(t, 400, call("GET", "/notifications?status=lost", nil, "").status)

	// Attempts: none yet, then some (written as the worker does), and an
	// unknown notification.
	require.Equal(t, 200, call("GET", "/notifications/"+id+"/attempts", nil, "").status)
	nid, _ := strconv.ParseInt(id, 10, 64)
	e.addAttempt(t, nid, 1, 7, "retry", "451 later", true)
	e.addAttempt(t, nid, 2, 8, "", "", false)
	att := call("GET", "/notifications/"+id+"/attempts", nil, "")
	require.Len(t, att.json["items"], 2)
	require.Equal(t, 404, call("GET", "/notifications/999/attempts", nil, "").status)

	// Cancel: a scheduled one, twice; unknown; a failed one (below) is
	// not cancelable.
	sched := call("POST", "/notifications", jsonHeaders(), body(t, map[string]any{"send_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}))
	require.Equal(t, 201, sched.status)
	require.Equal(t, "scheduled", sched.json["status"])
	c := call("POST", "/notifications/"+sched.json["id"].(string)+"/cancel", nil, "")
	require.Equal(t, 200, c.status)
	require.Equal(t, "canceled", c.json["status"])
	require.Equal(t, 200, call("POST", "/notifications/"+sched.json["id"].(string)+"/cancel", nil, "").status)
	require.Equal(t, 404, call("POST", "/notifications/999/cancel", nil, "").status)
	require.Equal(t, 400, call("POST", "/notifications/"+id+"/cancel?now=1", nil, "").status)

	// Dead letters.
	e.fail(t, nid, "550 no such user")
	require.Equal(t, 409, call("POST", "/notifications/"+id+"/cancel", nil, "").status)
	require.Equal(t, 200, call("GET", "/dead-letters", nil, "").status)
	require.Equal(t, 400, call("GET", "/dead-letters?limit=0", nil, "").status)
	rd := call("POST", "/dead-letters/redrive", jsonHeaders(), `{"ids":["`+id+`","999","2"],"dry_run":true}`)
	require.Equal(t, 200, rd.status)
	require.Equal(t, 400, call("POST", "/dead-letters/redrive", jsonHeaders(), `{"ids":["`+id+`"],"all":true}`).status)
	require.Equal(t, 415, call("POST", "/dead-letters/redrive", nil, `{}`).status)

	// Destinations: none, then a failing one; enabled once, then gone.
	require.Equal(t, 200, call("GET", "/destinations", nil, "").status)
	_, err = e.store.DestinationFailing(t.Context(), "webhook", "https://example.com:443", "connection refused", time.Now())
	require.NoError(t, err)
	dests := call("GET", "/destinations", nil, "")
	require.Equal(t, 200, dests.status)
	require.Len(t, dests.json["items"], 1)
	require.Equal(t, 200, call("GET", "/destinations?state=failing&limit=1", nil, "").status)
	require.Equal(t, 400, call("GET", "/destinations?state=up", nil, "").status)
	enable := "/destinations/" + url.PathEscape("https://example.com:443") + "/enable"
	require.Equal(t, 200, call("POST", enable, nil, "").status)
	require.Equal(t, 404, call("POST", enable, nil, "").status)

	// Recipients: put, read, a create resolved from one, delete.
	require.Equal(t, 200, call("PUT", "/recipients/u-r", jsonHeaders(), `{"email":"ada@example.com","locale":"de","time_zone":"Europe/Berlin"}`).status)
	require.Equal(t, 400, call("PUT", "/recipients/u-r", jsonHeaders(), `{"email":"not an address"}`).status)
	require.Equal(t, 415, call("PUT", "/recipients/u-r", nil, `{}`).status)
	require.Equal(t, 200, call("GET", "/recipients/u-r", nil, "").status)
	require.Equal(t, 404, call("GET", "/recipients/nobody", nil, "").status)
	require.Equal(t, 422, call("POST", "/notifications", jsonHeaders(), `{"user_id":"nobody","channel":"email","subject":"s","body":"b"}`).status)
	// Templates: put, read, list, preview, a templated create.
	require.Equal(t, 201, call("PUT", "/templates/welcome", jsonHeaders(), `{"channel":"email","subject":"Hi {{.name}}","text":"Hello {{.name}}","html":"<p>{{.name}}</p>"}`).status)
	require.Equal(t, 201, call("PUT", "/templates/welcome", jsonHeaders(), `{"channel":"email","locale":"de","subject":"Hallo {{.name}}","text":"Hallo {{.name}}"}`).status)
	require.Equal(t, 422, call("PUT", "/templates/welcome", jsonHeaders(), `{"channel":"email","subject":"s","text":"{{.name"}`).status)
	require.Equal(t, 400, call("PUT", "/templates/welcome", jsonHeaders(), `{"channel":"sms","text":"x"}`).status)
	require.Equal(t, 415, call("PUT", "/templates/welcome", nil, `{}`).status)
	require.Equal(t, 200, call("GET", "/templates/welcome", nil, "").status)
	require.Equal(t, 200, call("GET", "/templates/welcome?version=1", nil, "").status)
	require.Equal(t, 400, call("GET", "/templates/welcome?version=x", nil, "").status)
	require.Equal(t, 404, call("GET", "/templates/nope", nil, "").status)
	require.Equal(t, 200, call("GET", "/templates", nil, "").status)
	require.Equal(t, 200, call("POST", "/templates/welcome/preview", jsonHeaders(), `{"locale":"de","data":{"name":"Ada"}}`).status)
	require.Equal(t, 422, call("POST", "/templates/welcome/preview", jsonHeaders(), `{"data":{}}`).status)
	require.Equal(t, 400, call("POST", "/templates/welcome/preview", jsonHeaders(), `{"data":[]}`).status)
	require.Equal(t, 415, call("POST", "/templates/welcome/preview", nil, `{}`).status)
	require.Equal(t, 201, call("POST", "/notifications", jsonHeaders(), `{"user_id":"u-r","channel":"email","template":"welcome","data":{"name":"Ada"}}`).status)
	require.Equal(t, 204, call("DELETE", "/recipients/u-r", nil, "").status)
	require.Equal(t, 404, call("DELETE", "/recipients/u-r", nil, "").status)

	// Preferences: put, read, refusals, a suppressed create, a link
	// made, shown, followed and forged.
	require.Equal(t, 200, call("PUT", "/recipients/u-p/preferences", jsonHeaders(), `{"categories":{"news":{"email":false}}}`).status)
	require.Equal(t, 422, call("PUT", "/recipients/u-p/preferences", jsonHeaders(), `{"categories":{"security":{"email":false}}}`).status)
	require.Equal(t, 400, call("PUT", "/recipients/u-p/preferences", jsonHeaders(), `{"categories":{"no good":{}}}`).status)
	require.Equal(t, 413, call("PUT", "/recipients/u-p/preferences", jsonHeaders(), strings.Repeat("x", api.DefaultMaxBodyBytes+1)).status)
	require.Equal(t, 415, call("PUT", "/recipients/u-p/preferences", nil, `{}`).status)
	require.Equal(t, 200, call("GET", "/recipients/u-p/preferences", nil, "").status)
	sup := call("POST", "/notifications", jsonHeaders(), `{"user_id":"u-p","channel":"email","to":"a@example.com","subject":"s","body":"b","category":"news"}`)
	require.Equal(t, 201, sup.status)
	require.Equal(t, "suppressed", sup.json["status"])
	require.Equal(t, 200, call("GET", "/notifications/"+sup.json["id"].(string), nil, "").status)
	require.Equal(t, 200, call("GET", "/notifications?status=suppressed", nil, "").status)
	link := call("POST", "/recipients/u-p/preferences/links", jsonHeaders(), `{"category":"digest","channel":"email"}`)
	require.Equal(t, 201, link.status)
	require.Equal(t, 422, call("POST", "/recipients/u-p/preferences/links", jsonHeaders(), `{"category":"security","channel":"email"}`).status)
	require.Equal(t, 400, call("POST", "/recipients/u-p/preferences/links", jsonHeaders(), `{"category":"","channel":"email"}`).status)
	require.Equal(t, 413, call("POST", "/recipients/u-p/preferences/links", jsonHeaders(), strings.Repeat("x", api.DefaultMaxBodyBytes+1)).status)
	require.Equal(t, 415, call("POST", "/recipients/u-p/preferences/links", nil, `{}`).status)
	linkPath := link.json["url"].(string)
	require.Equal(t, 200, call("GET", linkPath, nil, "").status)
	require.Equal(t, 200, call("POST", linkPath, map[string][]string{"Content-Type": {"application/x-www-form-urlencoded"}}, "List-Unsubscribe=One-Click").status)
	require.Equal(t, 403, call("GET", linkPath+"x", nil, "").status)
	require.Equal(t, 403, call("POST", linkPath+"x", nil, "List-Unsubscribe=One-Click").status)

	// The deployment's state, with a worker's report.
	until := time.Now().Add(time.Minute)
	require.NoError(t, e.store.BeatProcess(t.Context(), notify.Process{ID: "w", Host: "h", PID: 1, Roles: []string{"worker"}, StartedAt: time.Now(),
		Senders: []notify.SenderReport{{Channel: "email", Class: "down", Reason: "refused", Since: time.Now(), Until: &until}, {Channel: "webhook", Up: true, Since: time.Now()}}}, time.Hour))
	require.Equal(t, 200, call("GET", "/status", nil, "").status)

	// Probes, metrics, the document.
	require.Equal(t, 200, call("GET", "/healthz", nil, "").status)
	require.Equal(t, 200, call("GET", "/readyz", nil, "").status)
	require.Equal(t, 200, call("GET", "/metrics", nil, "").status)
	require.Equal(t, 200, call("GET", "/openapi.json", nil, "").status)
	notReady, err := api.New(e.store, api.Config{Ready: []api.Check{{Name: "broker", Pinger: failing}}})
	require.NoError(t, err)
	w := httptest.NewRecorder()
	notReady.Handler().ServeHTTP(w, httptest.NewRequest("GET", "http://localhost/readyz", nil))
	s.check(t, "GET", "/readyz", reply{status: w.Code, header: w.Header(), raw: w.Body.String()})

	// 401 with a token; 503 once the store is closed.
	tok, err := api.New(e.store, api.Config{Token: "t"})
	require.NoError(t, err)
	for _, target := range []string{"/notifications", "/notifications/1", "/notifications/1/attempts"} {
		w := httptest.NewRecorder()
		tok.Handler().ServeHTTP(w, httptest.NewRequest("GET", "http://localhost"+target, nil))
		s.check(t, "GET", target, reply{status: w.Code, header: w.Header(), raw: w.Body.String()})
	}
	require.NoError(t, e.store.Close())
	for _, target := range []string{"/notifications", "/notifications/1", "/notifications/1/attempts"} {
		require.Equal(t, 503, call("GET", target, nil, "").status, target)
	}

	// Every operation was seen answering a success.
	for _, pattern := range s.operations(t) {
		op, _ := s.operation(t, pattern)
		id := op["operationId"].(string)
		ok := false
		for st := range obj(t, op["responses"], id) {
			if strings.HasPrefix(st, "2") && s.seen[id+" "+st] {
				ok = true
			}
			if !s.seen[id+" "+st] {
				t.Logf("not exercised here: %s %s", id, st)
			}
		}
		require.True(t, ok, "no success of %s was checked", id)
	}
}

// writer opens a writable connection on the env's file, for rows the API
// cannot write: attempts (the worker writes them) and dead letters.
func (e *env) writer(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", e.path+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// sqliteTime is the store's time format.
const sqliteTime = "2006-01-02T15:04:05.000000Z"

// addAttempt writes a delivery_attempts row as the worker does.
func (e *env) addAttempt(t testing.TB, id int64, attempt int, msgID int64, outcome, errText string, finished bool) {
	t.Helper()
	now := time.Now().UTC()
	var fin any
	if finished {
		fin = now.Add(time.Second).Format(sqliteTime)
	}
	_, err := e.writer(t).Exec(`INSERT INTO delivery_attempts
		(notification_id, message_id, attempt, started_at, finished_at, outcome, error)
		VALUES (?, ?, ?, ?, ?, NULLIF(?, ''), NULLIF(?, ''))`, id, msgID, attempt, now.Format(sqliteTime), fin, outcome, errText)
	require.NoError(t, err)
}

// fail dead-letters a notification as the worker does after its last retry.
func (e *env) fail(t testing.TB, id int64, reason string) {
	t.Helper()
	now := time.Now().UTC().Format(sqliteTime)
	res, err := e.writer(t).Exec(`UPDATE notifications SET status = 'failed', attempts = attempts + 1,
		last_error = ?, failed_at = ?, updated_at = ? WHERE id = ?`, reason, now, now, id)
	require.NoError(t, err)
	n, err := res.RowsAffected()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

// The schemas refuse what the API must not answer, so that the response
// checks above can fail: unknown fields, a body in a listing, a time that is
// not RFC 3339, an unknown status or skip reason.
func TestOpenAPISchemasAreStrict(t *testing.T) {
	t.Parallel()
	s := loadSpec(t)
	valid := map[string]any{
		"id": "1", "user_id": "u", "channel": "email", "to": "a@example.com", "subject": "s",
		"status": "pending", "attempts": float64(0), "last_error": nil,
		"created_at": "2026-05-01T12:00:00.123456Z", "updated_at": "2026-05-01T12:00:00Z", "sent_at": nil, "failed_at": nil,
		"send_at": nil, "expires_at": nil, "canceled_at": nil, "expired_at": nil, "priority": "normal",
	}
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for kk, vv := range valid {
			m[kk] = vv
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	n := s.schema(t, "/components/schemas/Notification")
	require.NoError(t, n.Validate(valid))
	require.Error(t, n.Validate(with("body", "b")), "a listing item has no body")
	require.Error(t, n.Validate(with("created_at", "yesterday")))
	require.Error(t, n.Validate(with("status", "lost")))
	require.Error(t, n.Validate(with("priority", "urgent")), "an unknown priority")
	require.Error(t, n.Validate(with("id", float64(1))), "ids are strings")
	require.Error(t, n.Validate(with("subject", nil)), "every field is present")
	d := s.schema(t, "/components/schemas/NotificationDetail")
	detail := func(waiting any) map[string]any {
		m := with("body", "b")
		m["waiting"] = waiting
		m["html"], m["template"], m["template_version"], m["locale"] = nil, nil, nil, nil
		return m
	}
	require.NoError(t, d.Validate(detail(nil)))
	templated := detail(nil)
	templated["html"], templated["template"], templated["template_version"], templated["locale"] = "<p>b</p>", "welcome", float64(2), ""
	require.NoError(t, d.Validate(templated))
	templated["template_version"] = float64(0)
	require.Error(t, d.Validate(templated), "versions start at 1")
	templated = detail(nil)
	delete(templated, "html")
	require.Error(t, d.Validate(templated), "html is always there")
	templated = detail(nil)
	templated["unsubscribe_url"] = "https://herald.example.com/unsubscribe/x"
	require.Error(t, d.Validate(templated), "the unsubscribe link is not shown")
	require.NoError(t, d.Validate(detail(map[string]any{"destination": "email", "state": "failing", "reason": "r", "since": "2026-05-01T12:00:00Z"})))
	require.Error(t, d.Validate(with("body", "b")), "waiting is always there")
	require.Error(t, d.Validate(detail(map[string]any{"destination": "email", "state": "up", "reason": "r", "since": "2026-05-01T12:00:00Z"})))
	require.Error(t, d.Validate(valid), "the detail has the body")
	require.Error(t, d.Validate(with("extra", "x")))
	page := s.schema(t, "/components/schemas/NotificationPage")
	require.NoError(t, page.Validate(map[string]any{"items": []any{valid}, "next_cursor": "abc"}))
	require.Error(t, page.Validate(map[string]any{"items": []any{valid}, "cursor": "abc"}))
	// The create request is one of the channels' shapes, told apart by
	// channel.
	req := s.schema(t, "/components/schemas/CreateRequest")
	for _, ok := range []map[string]any{
		{"user_id": "u", "channel": "email", "to": "a@example.com", "subject": "s", "body": "b"},
		{"user_id": "u", "channel": "webhook", "to": "https://example.com/hook", "body": map[string]any{"a": float64(1)}},
		{"user_id": "u", "channel": "webhook", "to": "http://example.com/hook", "body": `"text"`, "subject": ""},
		{"user_id": "u", "channel": "webhook", "to": "https://example.com/hook", "body": `{"event":"order.paid"}`},
		{"user_id": "u", "channel": "webhook", "to": "https://example.com/hook", "body": []any{float64(1), "a", nil}},
		{"user_id": "u", "channel": "webhook", "to": "https://example.com/hook", "body": map[string]any{}},
		{"user_id": "u", "channel": "webhook", "to": "https://example.com/hook", "body": float64(1.5)},
		{"user_id": "u", "channel": "webhook", "to": "https://example.com/hook", "body": false},
		{"user_id": "u", "channel": "telegram", "to": "-1001234567890", "body": "text"},
		{"user_id": "u", "channel": "telegram", "to": "@herald_news", "body": "text"},
		{"user_id": "u", "channel": "telegram", "channels": []any{"telegram", "email"}, "template": "shipped", "data": map[string]any{}},
	} {
		require.NoError(t, req.Validate(ok), "%v", ok)
	}
	for _, bad := range []map[string]any{
		{"user_id": "u", "channel": "email", "to": "a@example.com", "body": "b"},
		{"user_id": "u", "channel": "email", "to": "a@example.com", "subject": "s", "body": map[string]any{"a": float64(1)}},
		{"user_id": "u", "channel": "webhook", "to": "https://example.com/hook", "subject": "s", "body": "b"},
		{"user_id": "u", "channel": "webhook", "to": "ftp://example.com/x", "body": "b"},
		{"user_id": "u", "channel": "webhook", "to": "https://example.com/hook", "body": nil},
		// A string body is the JSON text sent: the server answers 400 to
		// one that is not JSON.
		{"user_id": "u", "channel": "webhook", "to": "https://example.com/hook", "body": "text"},
		{"user_id": "u", "channel": "webhook", "to": "https://example.com/hook", "body": ""},
		{"user_id": "u", "channel": "telegram", "to": "not a chat", "body": "text"},
		{"user_id": "u", "channel": "telegram", "to": "@herald", "body": map[string]any{}},
		{"user_id": "u", "channel": "sms", "to": "+3312345678", "body": "b"},
		// A fallback list needs a template.
		{"user_id": "u", "channel": "telegram", "channels": []any{"telegram", "email"}, "body": "text"},
		{"user_id": "u", "channel": "telegram", "channels": []any{"telegram", "sms"}, "template": "shipped"},
	} {
		require.Error(t, req.Validate(bad), "%v", bad)
	}
	skip := s.schema(t, "/components/schemas/Skipped")
	require.NoError(t, skip.Validate(map[string]any{"id": "3", "reason": "not_found"}))
	require.Error(t, skip.Validate(map[string]any{"id": "3", "reason": "gone"}))
}

// Every error the API answers is documented: the ErrorCode enum is exactly
// the codes the package writes, every operation behind the token lists 401,
// every one that reads parameters or a body lists 400, and every error
// response has the one error shape.
func TestOpenAPIErrorsDocumented(t *testing.T) {
	t.Parallel()
	s := loadSpec(t)
	schemas := obj(t, obj(t, s.doc["components"], "components")["schemas"], "schemas")
	var documented []string
	for _, c := range obj(t, schemas["ErrorCode"], "ErrorCode")["enum"].([]any) {
		documented = append(documented, c.(string))
	}
	used := map[string]bool{}
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	codeRE := regexp.MustCompile(`Code: +"([a-z0-9_]+)"`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range codeRE.FindAllSubmatch(src, -1) {
			used[string(m[1])] = true
		}
		// The fallback of writeJSON is a literal reply.
		for _, m := range regexp.MustCompile(`"code":"([a-z0-9_]+)"`).FindAllSubmatch(src, -1) {
			used[string(m[1])] = true
		}
	}
	require.ElementsMatch(t, slices.Sorted(maps.Keys(used)), documented, "ErrorCode's enum and the codes the API writes")

	for _, pattern := range s.operations(t) {
		op, ptr := s.operation(t, pattern)
		responses := obj(t, op["responses"], pattern)
		sec, hasSec := op["security"].([]any)
		if !hasSec || len(sec) > 0 {
			require.Contains(t, responses, "401", "%s needs the token: it lists 401", pattern)
		}
		if _, ok := op["parameters"]; ok || op["requestBody"] != nil {
			// A bad {token} (a preference link's) is a 403: a link that
			// is not herald's, however it is malformed.
			if !strings.Contains(pattern, "{id}") && !strings.Contains(pattern, "{token}") {
				require.Contains(t, responses, "400", "%s reads input: it lists 400", pattern)
			}
		}
		for status, r := range responses {
			if strings.HasPrefix(status, "2") {
				continue
			}
			res, _ := s.resolve(t, obj(t, r, status), ptr+"/responses/"+status)
			if strings.HasSuffix(pattern, " /unsubscribe/{token}") {
				// A preference link is followed by a person in a
				// browser: its answers, errors too, are pages.
				require.Equal(t, []string{"text/html"}, slices.Collect(maps.Keys(obj(t, res["content"], status))), "%s %s", pattern, status)
				continue
			}
			sch := obj(t, obj(t, obj(t, res["content"], status)["application/json"], status)["schema"], status)
			require.Contains(t, []string{"#/components/schemas/Error", "#/components/schemas/Ready"}, sch["$ref"], "%s %s", pattern, status)
		}
	}
}
