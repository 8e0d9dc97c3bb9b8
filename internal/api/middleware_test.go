package api_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/testlog"
)

func TestRequestID(t *testing.T) {
	t.Parallel()
	logs := &testlog.Buffer{}
	e := setup(t, api.Config{Token: "tok", Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	auth := func(kv ...string) map[string][]string {
		return jsonHeaders(append([]string{"Authorization", "Bearer tok"}, kv...)...)
	}
	made := regexp.MustCompile(`^[0-9a-f]{32}$`)

	// A valid id is echoed, logged with the request's lines and carried by
	// the outbox event to the delivery.
	r := do(t, http.MethodPost, e.url+"/notifications", auth("X-Request-Id", "req-42:abc/DEF_1.2"), body(t, nil))
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	require.Equal(t, "req-42:abc/DEF_1.2", r.header.Get("X-Request-Id"))
	var payload string
	require.NoError(t, e.db.QueryRow(`SELECT payload FROM outbox`).Scan(&payload))
	var ev notify.Requested
	require.NoError(t, json.Unmarshal([]byte(payload), &ev))
	require.Equal(t, "req-42:abc/DEF_1.2", ev.RequestID, "the event carries the request id: %s", payload)
	msg := notify.Message{ID: 1, Type: notify.EventRequested, Payload: []byte(payload)}
	dec, _, err := msg.Decode()
	require.NoError(t, err)
	require.Equal(t, "req-42:abc/DEF_1.2", dec.RequestID)
	require.Regexp(t, `"msg":"http request"[^\n]*"request_id":"req-42:abc/DEF_1.2"`, logs.String())

	// None, an invalid one, two: a fresh id each time, on every answer (a
	// 401, a 404 and a 405 included).
	cases := []struct {
		name    string
		method  string
		path    string
		headers map[string][]string
		status  int
	}{
		{"absent", http.MethodGet, "/notifications/1", auth(), http.StatusOK},
		{"too long", http.MethodGet, "/notifications/1", auth("X-Request-Id", strings.Repeat("a", notify.MaxRequestIDLen+1)), http.StatusOK},
		{"space", http.MethodGet, "/notifications/1", auth("X-Request-Id", "a b"), http.StatusOK},
		{"newline escape", http.MethodGet, "/notifications/1", auth("X-Request-Id", `a"b`), http.StatusOK},
		{"non-ASCII", http.MethodGet, "/notifications/1", auth("X-Request-Id", "héllo"), http.StatusOK},
		{"twice", http.MethodGet, "/notifications/1", auth("X-Request-Id", "one", "X-Request-Id", "two"), http.StatusOK},
		{"unauthorized", http.MethodGet, "/notifications/1", jsonHeaders("X-Request-Id", "bad id"), http.StatusUnauthorized},
		{"not found", http.MethodGet, "/nowhere", auth(), http.StatusNotFound},
		{"method", http.MethodDelete, "/notifications", auth(), http.StatusMethodNotAllowed},
	}
	seen := map[string]bool{}
	for _, c := range cases {
		r := do(t, c.method, e.url+c.path, c.headers, "")
		require.Equal(t, c.status, r.status, "%s: %s", c.name, r.raw)
		id := r.header.Get("X-Request-Id")
		require.Regexp(t, made, id, c.name)
		require.False(t, seen[id], "%s: ids are fresh", c.name)
		seen[id] = true
		require.Contains(t, logs.String(), `"request_id":"`+id+`"`, "%s: the request's log line has its id", c.name)
	}
	// The longest valid id is kept.
	long := strings.Repeat("x", notify.MaxRequestIDLen)
	r = do(t, http.MethodGet, e.url+"/healthz", map[string][]string{"X-Request-Id": {long}}, "")
	require.Equal(t, long, r.header.Get("X-Request-Id"))
}

func TestCORSOffByDefault(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{})
	r := do(t, http.MethodOptions, e.url+"/notifications", map[string][]string{
		"Origin": {"https://app.example.com"}, "Access-Control-Request-Method": {"POST"}}, "")
	require.Equal(t, http.StatusMethodNotAllowed, r.status, "no CORS: a preflight is a plain OPTIONS")
	require.Empty(t, r.header.Get("Access-Control-Allow-Origin"))
	r = do(t, http.MethodGet, e.url+"/notifications", map[string][]string{"Origin": {"https://app.example.com"}}, "")
	require.Equal(t, http.StatusOK, r.status)
	require.Empty(t, r.header.Get("Access-Control-Allow-Origin"))
}

func TestCORSAllowedOrigins(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{Token: "tok", CORSOrigins: []string{"https://app.example.com", "http://localhost:3000"}})
	preflight := func(origin, method string) reply {
		return do(t, http.MethodOptions, e.url+"/notifications", map[string][]string{
			"Origin": {origin}, "Access-Control-Request-Method": {method},
			"Access-Control-Request-Headers": {"content-type, idempotency-key, authorization"}}, "")
	}

	// An allowed origin's preflight is answered without the token.
	r := preflight("https://app.example.com", "POST")
	require.Equal(t, http.StatusNoContent, r.status, r.raw)
	require.Equal(t, "https://app.example.com", r.header.Get("Access-Control-Allow-Origin"))
	require.Equal(t, "GET, HEAD, POST", r.header.Get("Access-Control-Allow-Methods"))
	for _, h := range []string{"Authorization", "Content-Type", "Idempotency-Key", "X-Request-Id"} {
		require.Contains(t, r.header.Get("Access-Control-Allow-Headers"), h)
	}
	require.NotEmpty(t, r.header.Get("Access-Control-Max-Age"))
	require.Contains(t, r.header.Values("Vary"), "Origin")
	require.NotEmpty(t, r.header.Get("X-Request-Id"))

	// Another origin gets no CORS headers: its browser refuses the reply.
	r = preflight("https://evil.example.com", "POST")
	require.Equal(t, http.StatusUnauthorized, r.status)
	require.Empty(t, r.header.Get("Access-Control-Allow-Origin"))
	r = preflight("https://app.example.com.evil.example", "POST")
	require.Empty(t, r.header.Get("Access-Control-Allow-Origin"))

	// The real request still needs the token, and says which headers a
	// script may read.
	r = do(t, http.MethodPost, e.url+"/notifications", jsonHeaders("Origin", "http://localhost:3000"), body(t, nil))
	require.Equal(t, http.StatusUnauthorized, r.status)
	require.Equal(t, "http://localhost:3000", r.header.Get("Access-Control-Allow-Origin"))
	r = do(t, http.MethodPost, e.url+"/notifications", jsonHeaders("Origin", "http://localhost:3000", "Authorization", "Bearer tok"), body(t, nil))
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	require.Equal(t, "http://localhost:3000", r.header.Get("Access-Control-Allow-Origin"))
	for _, h := range []string{"Location", "X-Request-Id", "Idempotent-Replayed", "Retry-After"} {
		require.Contains(t, r.header.Get("Access-Control-Expose-Headers"), h)
	}
}

func TestCORSAnyOrigin(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{CORSOrigins: []string{"*"}})
	r := do(t, http.MethodOptions, e.url+"/notifications/7", map[string][]string{
		"Origin": {"https://anything.example"}, "Access-Control-Request-Method": {"GET"}}, "")
	require.Equal(t, http.StatusNoContent, r.status)
	require.Equal(t, "*", r.header.Get("Access-Control-Allow-Origin"))
	require.Equal(t, "GET, HEAD", r.header.Get("Access-Control-Allow-Methods"))
	// An OPTIONS that is no preflight is still a 405.
	r = do(t, http.MethodOptions, e.url+"/notifications", map[string][]string{"Origin": {"https://anything.example"}}, "")
	require.Equal(t, http.StatusMethodNotAllowed, r.status)
}

func TestCORSOriginsValidated(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{})
	for _, o := range []string{"app.example.com", "https://app.example.com/", "https://*.example.com", "ftp://x", "https://", ""} {
		_, err := api.New(e.store, api.Config{CORSOrigins: []string{o}})
		require.ErrorContains(t, err, "CORS origin", o)
	}
	for _, o := range []string{"https://app.example.com", "http://localhost:3000", "*"} {
		_, err := api.New(e.store, api.Config{CORSOrigins: []string{o}})
		require.NoError(t, err, o)
	}
}

// Over HTTP: a key is the user's; another user's create with it is a new
// notification, not a 409.
func TestIdempotencyKeyScopedToUser(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{})
	first := do(t, http.MethodPost, e.url+"/notifications", jsonHeaders("Idempotency-Key", "welcome"), body(t, nil))
	require.Equal(t, http.StatusCreated, first.status, first.raw)
	other := do(t, http.MethodPost, e.url+"/notifications", jsonHeaders("Idempotency-Key", "welcome"), body(t, map[string]any{"user_id": "u-2"}))
	require.Equal(t, http.StatusCreated, other.status, other.raw)
	require.Empty(t, other.header.Get("Idempotent-Replayed"))
	require.NotEqual(t, first.json["id"], other.json["id"])
	again := do(t, http.MethodPost, e.url+"/notifications", jsonHeaders("Idempotency-Key", "welcome"), body(t, map[string]any{"user_id": "u-2"}))
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, other.json["id"], again.json["id"])
	n, o := e.rows(t)
	require.Equal(t, 2, n)
	require.Equal(t, 2, o)
}
