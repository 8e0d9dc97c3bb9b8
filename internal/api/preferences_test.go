package api_test

import (
	"context"
	"database/sql"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/webhook"
	"github.com/heraldhq/herald/internal/store/sqlite"
)

const testLinkSecret = "0123456789abcdef0123456789abcdef"

// setupPreferences serves an API whose store keeps the preferences, with
// "security" required, links signed with testLinkSecret (none when
// secret is empty) and the API token "tok".
func setupPreferences(t *testing.T, secret string) *env {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "herald.db")
	st, err := sqlite.Open(ctx, path, sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	require.NoError(t, st.Migrate(ctx))
	a, err := api.New(st, api.Config{Recipients: st, Templates: st, Preferences: st, Token: "tok",
		RequiredCategories: []string{"security"}, LinkSecret: []byte(secret), PublicURL: "https://herald.example.com",
		Channels: notify.Channels{notify.ChannelEmail: notify.EmailSpec, "webhook": notify.ChannelSpec{JSONBody: true, To: "an http(s) URL", Validate: webhook.Validate, RecipientField: "webhook_url"}}})
	require.NoError(t, err)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	db, err := sql.Open("sqlite", path+"?_pragma=query_only(ON)&_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return &env{url: srv.URL, handler: a.Handler(), store: st, db: db, path: path}
}

// authed is jsonHeaders with the test's API token.
func authed(kv ...string) map[string][]string {
	h := jsonHeaders(kv...)
	h["Authorization"] = []string{"Bearer tok"}
	return h
}

func (e *env) prefs(t *testing.T, user string) map[string]any {
	t.Helper()
	r := do(t, "GET", e.url+"/recipients/"+user+"/preferences", authed(), "")
	require.Equal(t, 200, r.status, r.raw)
	c, _ := r.json["categories"].(map[string]any)
	return c
}

func TestPreferencesPutGet(t *testing.T) {
	t.Parallel()
	e := setupPreferences(t, testLinkSecret)
	r := do(t, "GET", e.url+"/recipients/u-1/preferences", authed(), "")
	require.Equal(t, 200, r.status, r.raw)
	require.Empty(t, r.json["categories"], "none is an empty set, not a 404")
	require.Equal(t, []any{"security"}, r.json["required_categories"])

	r = do(t, "PUT", e.url+"/recipients/u-1/preferences", authed(), `{"categories":{"news":{"email":false,"webhook":true}}}`)
	require.Equal(t, 200, r.status, r.raw)
	require.Equal(t, map[string]any{"news": map[string]any{"email": false, "webhook": true}}, r.json["categories"])
	require.Equal(t, map[string]any{"news": map[string]any{"email": false, "webhook": true}}, e.prefs(t, "u-1"))
	// Opting in to a required category is fine.
	r = do(t, "PUT", e.url+"/recipients/u-1/preferences", authed(), `{"categories":{"news":{"email":false},"security":{"email":true}}}`)
	require.Equal(t, 200, r.status, r.raw)

	r = do(t, "PUT", e.url+"/recipients/u-1/preferences", jsonHeaders(), `{"categories":{}}`)
	require.Equal(t, 401, r.status, "the preferences are behind the token")
}

func TestPreferencesPutRefusals(t *testing.T) {
	t.Parallel()
	e := setupPreferences(t, testLinkSecret)
	require.Equal(t, 200, do(t, "PUT", e.url+"/recipients/u-1/preferences", authed(), `{"categories":{"news":{"email":false}}}`).status)
	for _, tc := range []struct {
		body   string
		status int
		code   string
		in     string
	}{
		{`{"categories":{"security":{"email":false}}}`, 422, "required_category", `"security" is required`},
		{`{"categories":{"news":{"pigeon":false}}}`, 422, "unprocessable", `"pigeon"`},
		{`{"categories":{"bad name":{"email":false}}}`, 400, "invalid_field", `"bad name"`},
		{`{"categories":{"news":{"email":null}}}`, 400, "invalid_field", "true or false"},
		{`{"categories":{"news":null}}`, 400, "invalid_field", "object"},
		{`{"categories":{"news":{"email":"no"}}}`, 400, "invalid_field", ""},
		{`{}`, 400, "invalid_field", "required"},
		{`{"categories":{},"x":1}`, 400, "unknown_field", ""},
	} {
		r := do(t, "PUT", e.url+"/recipients/u-1/preferences", authed(), tc.body)
		require.Equal(t, tc.status, r.status, "%s: %s", tc.body, r.raw)
		require.Equal(t, tc.code, r.errCode(), tc.body)
		require.Contains(t, r.json["error"].(map[string]any)["message"], tc.in, tc.body)
	}
	require.Equal(t, map[string]any{"news": map[string]any{"email": false}}, e.prefs(t, "u-1"), "nothing was changed")
}

// TestSuppressedCreate: a create in a category its user opted out of on
// its channel answers 201 and ends suppressed, with its status event and
// no notification.requested event; a required category, another channel
// or another category goes.
func TestSuppressedCreate(t *testing.T) {
	t.Parallel()
	e := setupPreferences(t, testLinkSecret)
	require.Equal(t, 200, do(t, "PUT", e.url+"/recipients/u-1/preferences", authed(), `{"categories":{"news":{"email":false}}}`).status)
	create := func(cat string) reply {
		return do(t, "POST", e.url+"/notifications", authed(), `{"user_id":"u-1","channel":"email","to":"a@example.com","subject":"s","body":"b","category":"`+cat+`"}`)
	}
	c := create("news")
	require.Equal(t, 201, c.status, c.raw)
	require.Equal(t, "suppressed", c.json["status"])
	require.Equal(t, "news", c.json["category"])
	got := do(t, "GET", e.url+"/notifications/"+c.json["id"].(string), authed(), "")
	require.Equal(t, "suppressed", got.json["status"])
	var types []string
	rows, err := e.db.Query(`SELECT event_type FROM outbox WHERE json_extract(payload, '$.notification_id') = ? ORDER BY id`, c.json["id"])
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		types = append(types, s)
	}
	require.NoError(t, rows.Close())
	require.Equal(t, []string{notify.EventSuppressed}, types, "the status event only: no worker ever sees it")

	list := do(t, "GET", e.url+"/notifications?status=suppressed", authed(), "")
	require.Equal(t, 200, list.status, list.raw)
	require.Len(t, list.json["items"], 1)

	for _, cat := range []string{"security", "billing"} {
		c := create(cat)
		require.Equal(t, 201, c.status, c.raw)
		require.Equal(t, "pending", c.json["status"], cat)
	}
	bad := do(t, "POST", e.url+"/notifications", authed(), `{"user_id":"u-1","channel":"email","to":"a@example.com","subject":"s","body":"b","category":"no good"}`)
	require.Equal(t, 400, bad.status)
	require.Equal(t, "category", bad.errField())
	batch := do(t, "POST", e.url+"/notifications/batch", authed(), `{"notifications":[{"user_id":"u-1","channel":"email","to":"a@example.com","subject":"s","body":"b","category":"news"}]}`)
	require.Equal(t, 207, batch.status, batch.raw)
	require.Equal(t, true, batch.json["results"].([]any)[0].(map[string]any)["suppressed"], "a batch item is suppressed as a single create is: %s", batch.raw)
}

var linkRe = regexp.MustCompile(`^https://herald\.example\.com(/unsubscribe/[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+)$`)

// makeLink makes a preference link and returns its path.
func (e *env) makeLink(t *testing.T, user, body string) string {
	t.Helper()
	r := do(t, "POST", e.url+"/recipients/"+user+"/preferences/links", authed(), body)
	require.Equal(t, 201, r.status, r.raw)
	m := linkRe.FindStringSubmatch(r.json["url"].(string))
	require.NotNil(t, m, r.json["url"])
	exp, err := time.Parse(time.RFC3339, r.json["expires_at"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(notify.PreferenceLinkTTL), exp, time.Minute)
	return m[1]
}

// TestPreferenceLink: a signed link opts out without the token; its GET
// only shows a form; a bad signature is 403 and changes nothing.
func TestPreferenceLink(t *testing.T) {
	t.Parallel()
	e := setupPreferences(t, testLinkSecret)
	require.Equal(t, 200, do(t, "PUT", e.url+"/recipients/u-1/preferences", authed(), `{"categories":{"digest":{"email":false}}}`).status)
	path := e.makeLink(t, "u-1", `{"category":"news","channel":"email"}`)

	page := do(t, "GET", e.url+path, nil, "")
	require.Equal(t, 200, page.status, page.raw)
	require.True(t, strings.HasPrefix(page.header.Get("Content-Type"), "text/html"))
	require.Contains(t, page.raw, `<form method="post">`)
	require.Contains(t, page.raw, "&#34;news&#34;")
	require.Equal(t, map[string]any{"digest": map[string]any{"email": false}}, e.prefs(t, "u-1"), "a GET changes nothing")

	// A bad signature, another user's payload with this signature, a
	// truncated token: 403, nothing changed.
	payload, sig, _ := strings.Cut(strings.TrimPrefix(path, "/unsubscribe/"), ".")
	other := e.makeLink(t, "u-2", `{"category":"news","channel":"email"}`)
	otherPayload, _, _ := strings.Cut(strings.TrimPrefix(other, "/unsubscribe/"), ".")
	flipped := []byte(sig)
	flipped[0] ^= 1
	if flipped[0] == '.' || flipped[0] == '/' {
		flipped[0] = 'A'
	}
	for _, bad := range []string{payload + "." + string(flipped), otherPayload + "." + sig, payload, payload + "." + sig[:8]} {
		r := do(t, "POST", e.url+"/unsubscribe/"+bad, map[string][]string{"Content-Type": {"application/x-www-form-urlencoded"}}, "List-Unsubscribe=One-Click")
		require.Equal(t, 403, r.status, bad)
		require.Equal(t, 403, do(t, "GET", e.url+"/unsubscribe/"+bad, nil, "").status)
	}
	require.Equal(t, map[string]any{"digest": map[string]any{"email": false}}, e.prefs(t, "u-1"), "a bad link changes nothing")
	require.Empty(t, e.prefs(t, "u-2"))

	// The POST records the opt-out, beside the others, without the token;
	// twice answers the same.
	for range 2 {
		r := do(t, "POST", e.url+path, map[string][]string{"Content-Type": {"application/x-www-form-urlencoded"}}, "List-Unsubscribe=One-Click")
		require.Equal(t, 200, r.status, r.raw)
		require.Contains(t, r.raw, "no longer receive")
	}
	require.Equal(t, map[string]any{"digest": map[string]any{"email": false}, "news": map[string]any{"email": false}}, e.prefs(t, "u-1"))
	c := do(t, "POST", e.url+"/notifications", authed(), `{"user_id":"u-1","channel":"email","to":"a@example.com","subject":"s","body":"b","category":"news"}`)
	require.Equal(t, 201, c.status, c.raw)
	require.Equal(t, "suppressed", c.json["status"])

	// No link for a required category, nor for a channel herald does not
	// know.
	r := do(t, "POST", e.url+"/recipients/u-1/preferences/links", authed(), `{"category":"security","channel":"email"}`)
	require.Equal(t, 422, r.status)
	require.Equal(t, "required_category", r.errCode())
	r = do(t, "POST", e.url+"/recipients/u-1/preferences/links", authed(), `{"category":"news","channel":"pigeon"}`)
	require.Equal(t, 422, r.status)
	require.Equal(t, "channel", r.errField())
	r = do(t, "POST", e.url+"/recipients/u-1/preferences/links", jsonHeaders(), `{"category":"news","channel":"email"}`)
	require.Equal(t, 401, r.status, "making a link needs the token")
}

// TestPreferenceLinkKeys: a link signed with another key is refused; with
// no key, links are off and say so.
func TestPreferenceLinkKeys(t *testing.T) {
	t.Parallel()
	e := setupPreferences(t, testLinkSecret)
	path := e.makeLink(t, "u-1", `{"category":"news","channel":"email"}`)
	other := setupPreferences(t, strings.Repeat("x", 32))
	r := do(t, "POST", other.url+path, nil, "List-Unsubscribe=One-Click")
	require.Equal(t, 403, r.status)
	require.Empty(t, other.prefs(t, "u-1"))

	off := setupPreferences(t, "")
	r = do(t, "POST", off.url+"/recipients/u-1/preferences/links", authed(), `{"category":"news","channel":"email"}`)
	require.Equal(t, 404, r.status)
	require.Equal(t, "links_off", r.errCode())
	require.Contains(t, r.json["error"].(map[string]any)["message"], "HERALD_LINK_SECRET")
	r = do(t, "POST", off.url+path, nil, "List-Unsubscribe=One-Click")
	require.Equal(t, 404, r.status)
	require.Contains(t, r.raw, "HERALD_LINK_SECRET")
	require.Empty(t, off.prefs(t, "u-1"))
}
