package api_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/deadletter"
)

// setupDead is setup with the dead-letter routes, and n notifications of
// which the first failed ones are dead letters (failed in id order: the
// newest failure is the last id).
func setupDead(t *testing.T, n, failed int) (*env, string, []string) {
	t.Helper()
	e := setup(t, api.Config{})
	a, err := api.New(e.store, api.Config{DeadLetters: deadletter.New(e.store, nil)})
	require.NoError(t, err)
	srv := httptestServer(t, a.Handler())
	ids := createN(t, e, n)
	for _, s := range ids[:failed] {
		id, _ := strconv.ParseInt(s, 10, 64)
		e.fail(t, id, "550 <no such user>")
	}
	return e, srv, ids
}

// The listing checks its parameters as GET /notifications does: every
// refusal names the parameter.
func TestDeadLetterListRefuses(t *testing.T) {
	t.Parallel()
	_, srv, _ := setupDead(t, 1, 1)
	for query, field := range map[string]string{
		"colour=red":          "colour",
		"limit=2&limit=3":     "limit",
		"limit=0":             "limit",
		"limit=501":           "limit",
		"limit=1e2":           "limit",
		"limit=+5":            "limit",
		"since=forever":       "since",
		"since=-1h":           "since",
		"error=":              "error",
		"error=%00":           "error",
		"cursor=abc":          "cursor",
		"since=1h&since=2h":   "since",
		"userid=u-1&limit=10": "userid",
	} {
		r := do(t, http.MethodGet, srv+"/dead-letters?"+query, nil, "")
		code := "invalid_field"
		switch field {
		case "colour", "userid":
			code = "unknown_field"
		case "cursor":
			code = "invalid_cursor"
		}
		requireError(t, r, http.StatusBadRequest, code, field)
	}
}

// Pages cut by cursor give every dead letter once, newest failure first; a
// cursor resumes only the listing it was issued for.
func TestDeadLetterListPages(t *testing.T) {
	t.Parallel()
	_, srv, ids := setupDead(t, 6, 5)
	var got []string
	next := ""
	for range 10 {
		q := url.Values{"limit": {"2"}, "since": {"24h"}}
		if next != "" {
			q.Set("cursor", next)
		}
		r := do(t, http.MethodGet, srv+"/dead-letters?"+q.Encode(), nil, "")
		require.Equal(t, http.StatusOK, r.status, r.raw)
		for _, it := range r.json["items"].([]any) {
			got = append(got, it.(map[string]any)["id"].(string))
		}
		c, more := r.json["next_cursor"].(string)
		if !more {
			require.LessOrEqual(t, len(r.json["items"].([]any)), 2)
			break
		}
		if next == "" {
			// The same listing however since is written; another is not.
			require.Equal(t, http.StatusOK, do(t, http.MethodGet, srv+"/dead-letters?since=1440m&cursor="+url.QueryEscape(c), nil, "").status)
			requireError(t, do(t, http.MethodGet, srv+"/dead-letters?since=24h&error=550&cursor="+url.QueryEscape(c), nil, ""), http.StatusBadRequest, "invalid_cursor", "cursor")
			requireError(t, do(t, http.MethodGet, srv+"/notifications?cursor="+url.QueryEscape(c), nil, ""), http.StatusBadRequest, "invalid_cursor", "cursor")
		}
		next = c
	}
	require.Equal(t, []string{ids[4], ids[3], ids[2], ids[1], ids[0]}, got)
}

// A redrive body is read as strictly as a create's: known keys spelled
// exactly and once, each of its type (ids are id strings), a field named on
// every refusal.
func TestRedriveRefuses(t *testing.T) {
	t.Parallel()
	_, srv, _ := setupDead(t, 1, 1)
	for body, want := range map[string][2]string{
		`{"ids":["abc"]}`:               {"invalid_field", "ids"},
		`{"ids":[1]}`:                   {"invalid_field", "ids"},
		`{"ids":"1"}`:                   {"invalid_field", "ids"},
		`{"ids":["0"]}`:                 {"invalid_field", "ids"},
		`{"limit":"3"}`:                 {"invalid_field", "limit"},
		`{"limit":1.5}`:                 {"invalid_field", "limit"},
		`{"limit":0}`:                   {"invalid_field", "limit"},
		`{"limit":10001}`:               {"invalid_field", "limit"},
		`{"all":"yes"}`:                 {"invalid_field", "all"},
		`{"dry_run":1,"all":true}`:      {"invalid_field", "dry_run"},
		`{"since":24}`:                  {"invalid_field", "since"},
		`{"since":"forever"}`:           {"invalid_field", "since"},
		`{"error":"a\u0000b"}`:          {"invalid_field", "error"},
		`{"colour":"red"}`:              {"unknown_field", "colour"},
		`{"IDS":["1"]}`:                 {"unknown_field", "IDS"},
		`{"all":true,"all":false}`:      {"invalid_field", "all"},
		`{"ids":["1"],"all":true}`:      {"invalid_field", "all"},
		`{"all":true} {}`:               {"invalid_json", ""},
		`[]`:                            {"invalid_json", ""},
		`{}`:                            {"empty_selection", ""},
		"{\"error\":\"\xff\"}":          {"invalid_utf8", ""},
		`{"error":"\ud800","all":true}`: {"invalid_utf8", "error"},
	} {
		r := do(t, http.MethodPost, srv+"/dead-letters/redrive", jsonHeaders(), body)
		requireError(t, r, http.StatusBadRequest, want[0], want[1])
	}
	// The selection is the body: a query parameter is refused, not ignored.
	requireError(t, do(t, http.MethodPost, srv+"/dead-letters/redrive?dry_run=true", jsonHeaders(), `{"all":true}`), http.StatusBadRequest, "unknown_field", "dry_run")
}

// Replies are JSON, not HTML: <, > and & come back as they were sent.
// After a redrive, last_error says what is true now (no error yet); the
// attempts keep the history.
func TestRepliesKeepAngleBracketsAndRedriveClearsLastError(t *testing.T) {
	t.Parallel()
	e, srv, ids := setupDead(t, 1, 1)
	r := do(t, http.MethodGet, srv+"/notifications/"+ids[0], nil, "")
	require.Contains(t, r.raw, `"to":"Ada <ada@example.com>"`)
	require.Contains(t, r.raw, `"last_error":"550 <no such user>"`)
	require.NotContains(t, r.raw, `\u003c`)
	r = do(t, http.MethodGet, srv+"/dead-letters", nil, "")
	require.Contains(t, r.raw, `"to":"Ada <ada@example.com>"`)

	id, _ := strconv.ParseInt(ids[0], 10, 64)
	e.addAttempt(t, id, 1, 7, "dead", "550 <no such user>", true)
	r = do(t, http.MethodPost, srv+"/dead-letters/redrive", jsonHeaders(), `{"ids":["`+ids[0]+`"]}`)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Equal(t, []any{ids[0]}, r.json["redriven"])
	r = do(t, http.MethodGet, srv+"/notifications/"+ids[0], nil, "")
	require.Equal(t, "pending", r.json["status"])
	require.Nil(t, r.json["last_error"], r.raw)
	r = do(t, http.MethodGet, srv+"/notifications/"+ids[0]+"/attempts", nil, "")
	require.True(t, strings.Contains(r.raw, `"error":"550 <no such user>"`), r.raw)
}

func httptestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
