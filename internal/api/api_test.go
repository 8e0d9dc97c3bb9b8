package api_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/store/sqlite"
)

var _ api.Notifications = (*sqlite.Store)(nil)
var _ api.Pinger = (*sqlite.Store)(nil)

// env is one API over its own SQLite file, served over real HTTP.
type env struct {
	url     string
	handler http.Handler
	store   *sqlite.Store
	db      *sql.DB // the same file, read-only, for counting rows
	path    string
}

// setup serves an API over a fresh, migrated SQLite store. The store and the
// inspecting connection close when the test ends.
func setup(t testing.TB, cfg api.Config) *env {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "herald.db")
	st, err := sqlite.Open(ctx, path, sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	require.NoError(t, st.Migrate(ctx))

	a, err := api.New(st, cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)

	db, err := sql.Open("sqlite", path+"?_pragma=query_only(ON)&_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return &env{url: srv.URL, handler: a.Handler(), store: st, db: db, path: path}
}

// rows counts notifications and outbox rows in the store's file.
func (e *env) rows(t testing.TB) (notifications, outbox int) {
	t.Helper()
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM notifications`).Scan(&notifications))
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM outbox`).Scan(&outbox))
	return notifications, outbox
}

// reply is a decoded HTTP answer.
type reply struct {
	status int
	header http.Header
	raw    string
	json   map[string]any
}

func (r reply) errCode() string  { return r.errString("code") }
func (r reply) errField() string { return r.errString("field") }
func (r reply) errString(k string) string {
	e, _ := r.json["error"].(map[string]any)
	s, _ := e[k].(string)
	return s
}

// do sends one request; headers maps names to values (a nil slice is not
// sent, so tests can write header names Go would canonicalise).
func do(t testing.TB, method, url string, headers map[string][]string, body string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	for k, vs := range headers {
		req.Header[http.CanonicalHeaderKey(k)] = vs
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	r := reply{status: res.StatusCode, header: res.Header, raw: string(b)}
	if method != http.MethodHead && strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		var v any
		require.NoError(t, json.Unmarshal(b, &v), "reply body %q", b)
		r.json, _ = v.(map[string]any) // nil for an array (dead letters)
	}
	return r
}

func jsonHeaders(kv ...string) map[string][]string {
	h := map[string][]string{"Content-Type": {"application/json"}}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == "Content-Type" {
			h[kv[i]] = []string{kv[i+1]}
			continue
		}
		h[kv[i]] = append(h[kv[i]], kv[i+1])
	}
	return h
}

// body renders a create request from the valid one with some fields
// replaced (a nil value removes the field).
func body(t testing.TB, changes map[string]any) string {
	t.Helper()
	m := map[string]any{
		"user_id": "u-1",
		"channel": "email",
		"to":      "Ada <ada@example.com>",
		"subject": "Hello",
		"body":    "Line one\nLine two",
	}
	for k, v := range changes {
		if v == nil {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return string(b)
}

// requireError checks an error reply: status, JSON shape, code, field, and
// that nothing internal leaked into it.
func requireError(t testing.TB, r reply, status int, code, field string) {
	t.Helper()
	require.Equal(t, status, r.status, "reply %s", r.raw)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	require.Equal(t, code, r.errCode(), "reply %s", r.raw)
	require.Equal(t, field, r.errField(), "reply %s", r.raw)
	require.NotEmpty(t, r.errString("message"))
	e := r.json["error"].(map[string]any)
	if field == "" {
		require.NotContains(t, e, "field", "field must be omitted when there is none")
	}
	for _, leak := range []string{"sql", "SELECT", "INSERT", "goroutine", ".go:", "panic"} {
		require.NotContains(t, r.raw, leak)
	}
}

func TestCreateAndGet(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{})
	before := time.Now().UTC().Add(-time.Second)

	r := do(t, http.MethodPost, e.url+"/notifications", jsonHeaders("Content-Type", "application/json; charset=utf-8"), body(t, nil))
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	id, ok := r.json["id"].(string)
	require.True(t, ok, "id must be a string: %s", r.raw)
	require.Regexp(t, `^[1-9][0-9]*$`, id)
	require.Equal(t, "/notifications/"+id, r.header.Get("Location"))
	require.Empty(t, r.header.Get("Idempotent-Replayed"))
	require.Equal(t, "u-1", r.json["user_id"])
	require.Equal(t, "email", r.json["channel"])
	require.Equal(t, "Ada <ada@example.com>", r.json["to"])
	require.Equal(t, "Hello", r.json["subject"])
	require.Equal(t, "pending", r.json["status"])
	require.EqualValues(t, 0, r.json["attempts"])
	for _, k := range []string{"last_error", "sent_at"} {
		v, present := r.json[k]
		require.True(t, present, "%s must be present", k)
		require.Nil(t, v, "%s must be null", k)
	}
	require.NotContains(t, r.json, "body", "the body is not echoed")
	for _, k := range []string{"created_at", "updated_at"} {
		s, _ := r.json[k].(string)
		require.True(t, strings.HasSuffix(s, "Z"), "%s must be UTC: %q", k, s)
		ts, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err, "%s must be RFC 3339", k)
		require.WithinRange(t, ts, before, time.Now().UTC().Add(time.Second))
	}

	got := do(t, http.MethodGet, e.url+r.header.Get("Location"), nil, "")
	require.Equal(t, http.StatusOK, got.status, got.raw)
	require.Equal(t, "Line one\nLine two", got.json["body"], "GET shows the body")
	delete(got.json, "body")
	require.Contains(t, got.json, "waiting", "GET tells why it waits")
	require.Nil(t, got.json["waiting"], "its destination is up")
	delete(got.json, "waiting")
	for _, k := range []string{"html", "template", "template_version", "locale"} {
		require.Contains(t, got.json, k, "GET shows %s", k)
		require.Nil(t, got.json[k], "%s of a create that gave its content", k)
		delete(got.json, k)
	}
	require.NotContains(t, got.json, "unsubscribe_url")
	require.Equal(t, r.json, got.json, "GET answers the shape POST answered, the body, what it was rendered from and why it waits")

	n, o := e.rows(t)
	require.Equal(t, 1, n)
	require.Equal(t, 1, o)
}

func TestCreateRejectsBadInput(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("a", n) }
	tests := []struct {
		name    string
		cfg     api.Config
		headers map[string][]string
		body    string
		status  int
		code    string
		field   string
	}{
		{name: "no content type", headers: map[string][]string{}, body: body(t, nil), status: 415, code: "unsupported_media_type"},
		{name: "text/plain", headers: jsonHeaders("Content-Type", "text/plain"), body: body(t, nil), status: 415, code: "unsupported_media_type"},
		{name: "form", headers: jsonHeaders("Content-Type", "application/x-www-form-urlencoded"), body: "user_id=1", status: 415, code: "unsupported_media_type"},
		{name: "other charset", headers: jsonHeaders("Content-Type", "application/json; charset=latin1"), body: body(t, nil), status: 415, code: "unsupported_media_type"},
		{name: "malformed content type", headers: jsonHeaders("Content-Type", "application/json;;=x"), body: body(t, nil), status: 415, code: "unsupported_media_type"},
		{name: "two content types", headers: map[string][]string{"Content-Type": {"application/json", "text/plain"}}, body: body(t, nil), status: 415, code: "unsupported_media_type"},
		{name: "too large", headers: jsonHeaders(), body: body(t, map[string]any{"body": long(1 << 20)}), status: 413, code: "too_large"},
		{name: "too large for a small limit", cfg: api.Config{MaxBodyBytes: 64}, headers: jsonHeaders(), body: body(t, nil), status: 413, code: "too_large"},
		{name: "malformed json", headers: jsonHeaders(), body: `{"user_id": "u-1",`, status: 400, code: "invalid_json"},
		{name: "not json", headers: jsonHeaders(), body: `hello`, status: 400, code: "invalid_json"},
		{name: "empty body", headers: jsonHeaders(), body: ``, status: 400, code: "invalid_json"},
		{name: "null", headers: jsonHeaders(), body: `null`, status: 400, code: "invalid_json"},
		{name: "array", headers: jsonHeaders(), body: `[` + body(t, nil) + `]`, status: 400, code: "invalid_json"},
		{name: "string", headers: jsonHeaders(), body: `"hi"`, status: 400, code: "invalid_json"},
		{name: "trailing garbage", headers: jsonHeaders(), body: body(t, nil) + ` x`, status: 400, code: "invalid_json"},
		{name: "two objects", headers: jsonHeaders(), body: body(t, nil) + body(t, nil), status: 400, code: "invalid_json"},
		{name: "unknown field", headers: jsonHeaders(), body: body(t, map[string]any{"cc": "eve@example.com"}), status: 400, code: "unknown_field", field: "cc"},
		{name: "key in other case", headers: jsonHeaders(), body: `{"user_id":"u","channel":"email","to":"a@example.com","TO":"eve@example.com","subject":"s","body":"b"}`, status: 400, code: "unknown_field", field: "TO"},
		{name: "duplicate key", headers: jsonHeaders(), body: `{"user_id":"u","channel":"email","to":"a@example.com","to":"eve@example.com","subject":"s","body":"b"}`, status: 400, code: "invalid_field", field: "to"},
		{name: "user_id number", headers: jsonHeaders(), body: body(t, map[string]any{"user_id": 42}), status: 400, code: "invalid_field", field: "user_id"},
		{name: "subject bool", headers: jsonHeaders(), body: body(t, map[string]any{"subject": true}), status: 400, code: "invalid_field", field: "subject"},
		{name: "to array", headers: jsonHeaders(), body: body(t, map[string]any{"to": []string{"a@example.com"}}), status: 400, code: "invalid_field", field: "to"},
		{name: "body object", headers: jsonHeaders(), body: body(t, map[string]any{"body": map[string]any{}}), status: 400, code: "invalid_field", field: "body"},
		{name: "channel null", headers: jsonHeaders(), body: `{"user_id":"u","channel":null,"to":"a@example.com","subject":"s","body":"b"}`, status: 400, code: "invalid_field", field: "channel"},
		{name: "missing user_id", headers: jsonHeaders(), body: body(t, map[string]any{"user_id": nil}), status: 400, code: "invalid_field", field: "user_id"},
		{name: "missing channel", headers: jsonHeaders(), body: body(t, map[string]any{"channel": nil}), status: 400, code: "invalid_field", field: "channel"},
		{name: "missing to", headers: jsonHeaders(), body: body(t, map[string]any{"to": nil}), status: 400, code: "invalid_field", field: "to"},
		{name: "missing subject", headers: jsonHeaders(), body: body(t, map[string]any{"subject": nil}), status: 400, code: "invalid_field", field: "subject"},
		{name: "missing body", headers: jsonHeaders(), body: body(t, map[string]any{"body": nil}), status: 400, code: "invalid_field", field: "body"},
		{name: "blank subject", headers: jsonHeaders(), body: body(t, map[string]any{"subject": "   "}), status: 400, code: "invalid_field", field: "subject"},
		{name: "unknown channel", headers: jsonHeaders(), body: body(t, map[string]any{"channel": "sms"}), status: 400, code: "invalid_field", field: "channel"},
		{name: "invalid address", headers: jsonHeaders(), body: body(t, map[string]any{"to": "not-an-address"}), status: 400, code: "invalid_field", field: "to"},
		{name: "two addresses", headers: jsonHeaders(), body: body(t, map[string]any{"to": "a@example.com, b@example.com"}), status: 400, code: "invalid_field", field: "to"},
		{name: "CRLF in to", headers: jsonHeaders(), body: body(t, map[string]any{"to": "a@example.com\r\nBcc: eve@example.com"}), status: 400, code: "invalid_field", field: "to"},
		{name: "LF in subject", headers: jsonHeaders(), body: body(t, map[string]any{"subject": "Hi\nBcc: eve@example.com"}), status: 400, code: "invalid_field", field: "subject"},
		{name: "CR in subject", headers: jsonHeaders(), body: body(t, map[string]any{"subject": "Hi\rthere"}), status: 400, code: "invalid_field", field: "subject"},
		{name: "invalid utf-8", headers: jsonHeaders(), body: `{"user_id":"u","channel":"email","to":"a@example.com","subject":"caf` + "\xe9" + `","body":"b"}`, status: 400, code: "invalid_utf8"},
		{name: "lone high surrogate", headers: jsonHeaders(), body: `{"user_id":"u\ud800","channel":"email","to":"a@example.com","subject":"s","body":"b"}`, status: 400, code: "invalid_utf8", field: "user_id"},
		{name: "lone low surrogate", headers: jsonHeaders(), body: `{"user_id":"u","channel":"email","to":"a@example.com","subject":"s","body":"b\\\udc00"}`, status: 400, code: "invalid_utf8", field: "body"},
		{name: "reversed surrogates", headers: jsonHeaders(), body: `{"user_id":"u","channel":"email","to":"a@example.com","subject":"\ude00\ud83d","body":"b"}`, status: 400, code: "invalid_utf8", field: "subject"},
		{name: "long user_id", headers: jsonHeaders(), body: body(t, map[string]any{"user_id": long(256)}), status: 400, code: "invalid_field", field: "user_id"},
		{name: "long to", headers: jsonHeaders(), body: body(t, map[string]any{"to": long(310) + "@example.com"}), status: 400, code: "invalid_field", field: "to"},
		{name: "long subject", headers: jsonHeaders(), body: body(t, map[string]any{"subject": long(999)}), status: 400, code: "invalid_field", field: "subject"},
		{name: "long body", headers: jsonHeaders(), body: body(t, map[string]any{"body": long(512<<10 + 1)}), status: 400, code: "invalid_field", field: "body"},
		{name: "empty idempotency key", headers: jsonHeaders("Idempotency-Key", ""), body: body(t, nil), status: 400, code: "invalid_header", field: "Idempotency-Key"},
		{name: "long idempotency key", headers: jsonHeaders("Idempotency-Key", long(256)), body: body(t, nil), status: 400, code: "invalid_header", field: "Idempotency-Key"},
		{name: "non-ascii idempotency key", headers: jsonHeaders("Idempotency-Key", "cl\u00e9"), body: body(t, nil), status: 400, code: "invalid_header", field: "Idempotency-Key"},
		{name: "two idempotency keys", headers: jsonHeaders("Idempotency-Key", "a", "Idempotency-Key", "b"), body: body(t, nil), status: 400, code: "invalid_header", field: "Idempotency-Key"},
		{name: "unknown fault", cfg: api.Config{DebugFaults: true}, headers: jsonHeaders("X-Herald-Fault", "before-commit"), body: body(t, nil), status: 400, code: "invalid_header", field: "X-Herald-Fault"},
		{name: "injected fault", cfg: api.Config{DebugFaults: true}, headers: jsonHeaders("X-Herald-Fault", "after-outbox-insert"), body: body(t, nil), status: 500, code: "injected_fault"},
		{name: "admission refused", cfg: api.Config{Admission: func(context.Context) error {
			return fmt.Errorf("backlog over limit: %w", &api.RetryAfterError{After: 1500 * time.Millisecond})
		}}, headers: jsonHeaders(), body: body(t, nil), status: 429, code: "too_many_requests"},
		{name: "admission failed", cfg: api.Config{Admission: func(context.Context) error {
			return errors.New("count backlog: dial tcp 127.0.0.1:5432: secret")
		}}, headers: jsonHeaders(), body: body(t, nil), status: 503, code: "unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, tt.cfg)
			r := do(t, http.MethodPost, e.url+"/notifications", tt.headers, tt.body)
			requireError(t, r, tt.status, tt.code, tt.field)
			require.NotContains(t, r.raw, "secret")
			switch tt.status {
			case 429:
				require.Equal(t, "2", r.header.Get("Retry-After"), "1.5s rounds up")
			case 503:
				require.Equal(t, "1", r.header.Get("Retry-After"))
			}
			n, o := e.rows(t)
			require.Zero(t, n, "no notification may be written")
			require.Zero(t, o, "no outbox event may be written")
		})
	}
}

// TestCreateAcceptsEscapes checks that strictness does not reject valid
// JSON: escaped keys, surrogate pairs, escaped backslashes before a "u".
func TestCreateAcceptsEscapes(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{})
	r := do(t, http.MethodPost, e.url+"/notifications", jsonHeaders(),
		`{"user_\u0069d":"u\\ud800","channel":"email","to":"a@example.com","subject":"Hi \ud83d\ude00 \u00e9","body":"tab\there\r\nnext"}`)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	require.Equal(t, `u\ud800`, r.json["user_id"])
	require.Equal(t, "Hi \U0001F600 \u00e9", r.json["subject"])
	n, o := e.rows(t)
	require.Equal(t, 1, n)
	require.Equal(t, 1, o)
}

// TestTooLargeChunked sends a body without Content-Length, so only the
// limit on reading can catch it.
func TestTooLargeChunked(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{MaxBodyBytes: 1024})
	big := body(t, map[string]any{"body": strings.Repeat("a", 2048)})
	req, err := http.NewRequest(http.MethodPost, e.url+"/notifications", io.MultiReader(strings.NewReader(big)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = -1 // unknown: the body goes out chunked
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	r := reply{status: res.StatusCode, header: res.Header, raw: string(b)}
	require.NoError(t, json.Unmarshal(b, &r.json))
	requireError(t, r, http.StatusRequestEntityTooLarge, "too_large", "")
	n, o := e.rows(t)
	require.Zero(t, n)
	require.Zero(t, o)
}

func TestFaultHeaderIgnoredWithoutDebugFaults(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{})
	r := do(t, http.MethodPost, e.url+"/notifications", jsonHeaders("X-Herald-Fault", "after-outbox-insert"), body(t, nil))
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	n, o := e.rows(t)
	require.Equal(t, 1, n)
	require.Equal(t, 1, o)
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{})
	h := jsonHeaders("Idempotency-Key", "order-42 ~!")

	first := do(t, http.MethodPost, e.url+"/notifications", h, body(t, nil))
	require.Equal(t, http.StatusCreated, first.status, first.raw)
	require.Empty(t, first.header.Get("Idempotent-Replayed"))

	again := do(t, http.MethodPost, e.url+"/notifications", h, body(t, nil))
	require.Equal(t, http.StatusCreated, again.status, again.raw)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, first.json, again.json, "a replay answers the first notification")
	require.Equal(t, first.header.Get("Location"), again.header.Get("Location"))

	conflict := do(t, http.MethodPost, e.url+"/notifications", h, body(t, map[string]any{"subject": "Other"}))
	requireError(t, conflict, http.StatusConflict, "idempotency_conflict", "Idempotency-Key")

	other := do(t, http.MethodPost, e.url+"/notifications", jsonHeaders("Idempotency-Key", "order-43"), body(t, nil))
	require.Equal(t, http.StatusCreated, other.status, other.raw)
	require.NotEqual(t, first.json["id"], other.json["id"])

	n, o := e.rows(t)
	require.Equal(t, 2, n, "one row per key")
	require.Equal(t, 2, o, "one event per key")
}

func TestGetNotFound(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{})
	created := do(t, http.MethodPost, e.url+"/notifications", jsonHeaders(), body(t, nil))
	require.Equal(t, http.StatusCreated, created.status, created.raw)

	for _, id := range []string{"12345", "abc", "-1", "0", "00", "+1", "1.0", "1e3", "0x1", " 1", "99999999999999999999", "9223372036854775808"} {
		r := do(t, http.MethodGet, e.url+"/notifications/"+strings.ReplaceAll(id, " ", "%20"), nil, "")
		requireError(t, r, http.StatusNotFound, "not_found", "")
	}
	r := do(t, http.MethodGet, e.url+"/nope", nil, "")
	requireError(t, r, http.StatusNotFound, "not_found", "")
	r = do(t, http.MethodGet, e.url+"/notifications/1/extra", nil, "")
	requireError(t, r, http.StatusNotFound, "not_found", "")
}

func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{})
	tests := []struct {
		method, path, allow string
	}{
		{http.MethodPut, "/notifications", "GET, HEAD, POST"},
		{http.MethodDelete, "/notifications", "GET, HEAD, POST"},
		{http.MethodPost, "/notifications/1/attempts", "GET, HEAD"},
		{http.MethodPut, "/notifications/1", "GET, HEAD"},
		{http.MethodPost, "/notifications/1", "GET, HEAD"},
		{http.MethodPost, "/healthz", "GET, HEAD"},
		{http.MethodDelete, "/readyz", "GET, HEAD"},
	}
	for _, tt := range tests {
		r := do(t, tt.method, e.url+tt.path, jsonHeaders(), body(t, nil))
		requireError(t, r, http.StatusMethodNotAllowed, "method_not_allowed", "")
		require.Equal(t, tt.allow, r.header.Get("Allow"), "%s %s", tt.method, tt.path)
	}
	n, o := e.rows(t)
	require.Zero(t, n)
	require.Zero(t, o)
}

func TestToken(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	e := setup(t, api.Config{Token: token})

	for name, auth := range map[string][]string{
		"missing":      nil,
		"wrong":        {"Bearer wrong-token"},
		"prefix":       {"Bearer s3cret"},
		"longer":       {"Bearer " + token + "x"},
		"other scheme": {"Basic " + token},
		"bare token":   {token},
		"empty bearer": {"Bearer "},
	} {
		h := jsonHeaders()
		h["Authorization"] = auth
		r := do(t, http.MethodPost, e.url+"/notifications", h, body(t, nil))
		requireError(t, r, http.StatusUnauthorized, "unauthorized", "")
		require.Equal(t, "Bearer", r.header.Get("WWW-Authenticate"), name)
		require.NotContains(t, r.raw, token)

		r = do(t, http.MethodGet, e.url+"/notifications/1", map[string][]string{"Authorization": auth}, "")
		requireError(t, r, http.StatusUnauthorized, "unauthorized", "")
	}
	n, o := e.rows(t)
	require.Zero(t, n)
	require.Zero(t, o)

	for _, p := range []string{"/healthz", "/readyz"} {
		r := do(t, http.MethodGet, e.url+p, nil, "")
		require.Equal(t, http.StatusOK, r.status, "%s needs no token: %s", p, r.raw)
	}

	h := jsonHeaders()
	h["Authorization"] = []string{"bearer " + token}
	created := do(t, http.MethodPost, e.url+"/notifications", h, body(t, nil))
	require.Equal(t, http.StatusCreated, created.status, created.raw)
	got := do(t, http.MethodGet, e.url+created.header.Get("Location"), map[string][]string{"Authorization": {"Bearer " + token}}, "")
	require.Equal(t, http.StatusOK, got.status, got.raw)
}

// pingFunc adapts a function to api.Pinger.
type pingFunc func(context.Context) error

func (f pingFunc) Ping(ctx context.Context) error { return f(ctx) }

func TestReadyz(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "herald.db")
	st, err := sqlite.Open(ctx, path, sqlite.Config{})
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx))
	broker := pingFunc(func(context.Context) error {
		return errors.New("dial amqp://guest:hunter2@127.0.0.1:5672/: connection refused")
	})

	ok, err := api.New(st, api.Config{Ready: []api.Check{{Name: "store", Pinger: st}}})
	require.NoError(t, err)
	okSrv := httptest.NewServer(ok.Handler())
	t.Cleanup(okSrv.Close)
	bad, err := api.New(st, api.Config{Ready: []api.Check{{Name: "store", Pinger: st}, {Name: "broker", Pinger: broker}}})
	require.NoError(t, err)
	badSrv := httptest.NewServer(bad.Handler())
	t.Cleanup(badSrv.Close)

	r := do(t, http.MethodGet, okSrv.URL+"/readyz", nil, "")
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Equal(t, map[string]any{"status": "ok"}, r.json)
	r = do(t, http.MethodGet, okSrv.URL+"/healthz", nil, "")
	require.Equal(t, http.StatusOK, r.status, r.raw)

	r = do(t, http.MethodGet, badSrv.URL+"/readyz", nil, "")
	requireError(t, r, http.StatusServiceUnavailable, "not_ready", "")
	require.Equal(t, []any{"broker"}, r.json["failed"])
	require.NotContains(t, r.raw, "hunter2")
	require.NotContains(t, r.raw, "amqp://")

	// A store that went away: readiness fails, and so do creates, with 503
	// and nothing internal in the reply.
	require.NoError(t, st.Close())
	r = do(t, http.MethodGet, okSrv.URL+"/readyz", nil, "")
	requireError(t, r, http.StatusServiceUnavailable, "not_ready", "")
	require.Equal(t, []any{"store"}, r.json["failed"])
	r = do(t, http.MethodPost, okSrv.URL+"/notifications", jsonHeaders(), body(t, nil))
	requireError(t, r, http.StatusServiceUnavailable, "unavailable", "")
	require.Equal(t, "1", r.header.Get("Retry-After"))
	r = do(t, http.MethodGet, okSrv.URL+"/notifications/1", nil, "")
	requireError(t, r, http.StatusServiceUnavailable, "unavailable", "")
	require.NotContains(t, r.raw, "closed")
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	e := setup(t, api.Config{
		Registerer: reg,
		Metrics:    promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		Token:      "tok",
	})
	auth := func(h map[string][]string) map[string][]string {
		h["Authorization"] = []string{"Bearer tok"}
		return h
	}
	created := do(t, http.MethodPost, e.url+"/notifications", auth(jsonHeaders()), body(t, nil))
	require.Equal(t, http.StatusCreated, created.status, created.raw)
	do(t, http.MethodPost, e.url+"/notifications", auth(jsonHeaders()), `{`)
	do(t, http.MethodGet, e.url+created.header.Get("Location"), auth(map[string][]string{}), "")
	do(t, http.MethodGet, e.url+"/notifications/424242", auth(map[string][]string{}), "")
	do(t, http.MethodGet, e.url+"/secret-path", auth(map[string][]string{}), "")
	do(t, http.MethodGet, e.url+"/notifications/1", nil, "")
	do(t, http.MethodGet, e.url+"/healthz", nil, "")

	samples := scrape(t, e.url)
	for series, want := range map[string]string{
		`herald_http_requests_total{code="200",route="GET /healthz"}`:                 "1",
		`herald_http_requests_total{code="200",route="GET /notifications/{id}"}`:      "1",
		`herald_http_requests_total{code="201",route="POST /notifications"}`:          "1",
		`herald_http_requests_total{code="400",route="POST /notifications"}`:          "1",
		`herald_http_requests_total{code="401",route="GET /notifications/{id}"}`:      "1",
		`herald_http_requests_total{code="404",route="GET /notifications/{id}"}`:      "1",
		`herald_http_requests_total{code="404",route="unmatched"}`:                    "1",
		`herald_http_request_duration_seconds_count{route="POST /notifications"}`:     "2",
		`herald_http_request_duration_seconds_count{route="GET /notifications/{id}"}`: "3",
	} {
		require.Equal(t, want, samples[series], series)
	}
	requests := 0
	for series := range samples {
		if strings.HasPrefix(series, "herald_http_requests_total{") {
			requests++
		}
		require.NotContains(t, series, "secret-path", "raw paths are never label values")
		require.NotContains(t, series, "424242", "raw paths are never label values")
	}
	require.Equal(t, 7, requests, "no other request series")

	// The scrape itself was counted, without a token.
	samples = scrape(t, e.url)
	require.Equal(t, "1", samples[`herald_http_requests_total{code="200",route="GET /metrics"}`])

	// The collectors are registered once: a second API on the same
	// registry is a configuration error, not a silent no-op.
	_, err := api.New(e.store, api.Config{Registerer: reg})
	require.Error(t, err)
}

// scrape reads GET /metrics (no token) and returns each sample's value by
// its series, as the text format spells it.
func scrape(t testing.TB, url string) map[string]string {
	t.Helper()
	r := do(t, http.MethodGet, url+"/metrics", nil, "")
	require.Equal(t, http.StatusOK, r.status, "/metrics needs no token: %s", r.raw)
	samples := map[string]string{}
	for _, line := range strings.Split(r.raw, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		require.Positive(t, i, "sample line %q", line)
		samples[line[:i]] = line[i+1:]
	}
	return samples
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{})
	for name, cfg := range map[string]api.Config{
		"negative body limit": {MaxBodyBytes: -1},
		"check without name":  {Ready: []api.Check{{Pinger: e.store}}},
		"check without ping":  {Ready: []api.Check{{Name: "store"}}},
		"duplicate check":     {Ready: []api.Check{{Name: "store", Pinger: e.store}, {Name: "store", Pinger: e.store}}},
	} {
		_, err := api.New(e.store, cfg)
		require.Error(t, err, name)
	}
	_, err := api.New(nil, api.Config{})
	require.Error(t, err)
}
