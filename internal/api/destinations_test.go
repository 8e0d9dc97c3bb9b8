package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/webhook"
)

// GET /destinations lists the records with the pending count of the
// notifications created through the API (their destination set from the
// channel's spec), times in UTC with Z; POST /destinations/{key}/enable
// takes the path-escaped key, answers 200 up, then 404. Both need the
// token.
func TestDestinations(t *testing.T) {
	t.Parallel()
	const token = "s3cret"
	hook := hookSpec
	hook.Destination = webhook.DestinationKey
	e := setupDestinations(t, api.Config{Token: token,
		Channels: notify.Channels{notify.ChannelEmail: notify.EmailSpec, "webhook": hook}})
	auth := func(h map[string][]string) map[string][]string {
		if h == nil {
			h = map[string][]string{}
		}
		h["Authorization"] = []string{"Bearer " + token}
		return h
	}
	const key = "https://hooks.example.com:443"
	for _, to := range []string{"https://HOOKS.example.com/a", "https://hooks.example.com:443/b", "https://other.example.com/c"} {
		r := do(t, http.MethodPost, e.url+"/notifications", auth(jsonHeaders()), `{"user_id":"u","channel":"webhook","to":"`+to+`","body":{"a":1}}`)
		require.Equal(t, http.StatusCreated, r.status, r.raw)
	}
	r := do(t, http.MethodPost, e.url+"/notifications", auth(jsonHeaders()), `{"user_id":"u","channel":"email","to":"a@example.com","subject":"s","body":"b"}`)
	require.Equal(t, http.StatusCreated, r.status, r.raw)

	list := do(t, http.MethodGet, e.url+"/destinations", auth(nil), "")
	require.Equal(t, http.StatusOK, list.status)
	require.JSONEq(t, `{"items":[]}`, list.raw)

	// Since is written in UTC whatever zone it was given in.
	at := time.Date(2026, 5, 1, 14, 0, 0, 0, time.FixedZone("CEST", 2*3600))
	_, err := e.store.DestinationFailing(t.Context(), "webhook", key, "cannot connect", at)
	require.NoError(t, err)
	_, err = e.store.DestinationFailing(t.Context(), "email", "email", "dial tcp: refused", at)
	require.NoError(t, err)
	ok, err := e.store.DisableDestination(t.Context(), "email", "failing for 72h")
	require.NoError(t, err)
	require.True(t, ok)

	require.Equal(t, http.StatusUnauthorized, do(t, http.MethodGet, e.url+"/destinations", nil, "").status)
	list = do(t, http.MethodGet, e.url+"/destinations", auth(nil), "")
	require.Equal(t, http.StatusOK, list.status)
	require.JSONEq(t, `{"items":[
		{"key":"email","channel":"email","state":"disabled","reason":"failing for 72h","since":"2026-05-01T12:00:00Z","pending":1},
		{"key":"https://hooks.example.com:443","channel":"webhook","state":"failing","reason":"cannot connect","since":"2026-05-01T12:00:00Z","pending":2}]}`, list.raw)
	r = do(t, http.MethodGet, e.url+"/destinations?state=up", auth(nil), "")
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Equal(t, "invalid_field", r.errCode())
	r = do(t, http.MethodGet, e.url+"/destinations?since=1h", auth(nil), "")
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Equal(t, "unknown_field", r.errCode())
	list = do(t, http.MethodGet, e.url+"/destinations?state=disabled", auth(nil), "")
	require.Equal(t, http.StatusOK, list.status)
	require.JSONEq(t, `{"items":[
		{"key":"email","channel":"email","state":"disabled","reason":"failing for 72h","since":"2026-05-01T12:00:00Z","pending":1}]}`, list.raw)

	// The key fully path-escaped, as the brief's clients send it.
	enable := e.url + "/destinations/https%3A%2F%2Fhooks.example.com%3A443/enable"
	require.Equal(t, http.StatusUnauthorized, do(t, http.MethodPost, enable, nil, "").status)
	p, err := e.store.ListDestinations(t.Context(), notify.DestinationFilter{Limit: 10})
	require.NoError(t, err)
	require.Len(t, p.Items, 2, "a refused enable changes nothing")
	r = do(t, http.MethodPost, enable, auth(nil), "")
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.JSONEq(t, `{"key":"https://hooks.example.com:443","state":"up"}`, r.raw)
	r = do(t, http.MethodPost, enable, auth(nil), "")
	require.Equal(t, http.StatusNotFound, r.status)
	require.Equal(t, "not_found", r.errCode())
	require.Equal(t, http.StatusMethodNotAllowed, do(t, http.MethodGet, enable, auth(nil), "").status)

	// Escaped as url.PathEscape does it (":" kept).
	r = do(t, http.MethodPost, e.url+"/destinations/"+url.PathEscape("email")+"/enable", auth(nil), "")
	require.Equal(t, http.StatusOK, r.status, r.raw)
	list = do(t, http.MethodGet, e.url+"/destinations", auth(nil), "")
	require.JSONEq(t, `{"items":[]}`, list.raw)
}

// setupDestinations is setup with the store serving the destination routes.
func setupDestinations(t *testing.T, cfg api.Config) *env {
	t.Helper()
	e := setup(t, api.Config{})
	cfg.Destinations = e.store
	a, err := api.New(e.store, cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	e.url, e.handler = srv.URL, a.Handler()
	return e
}

// GET /destinations pages by key with limit and cursor, as GET
// /notifications does: a full page names next_cursor, the last page none;
// a cursor is bound to its state filter; a bad limit or cursor is a 400
// naming the parameter.
func TestDestinationsPaging(t *testing.T) {
	t.Parallel()
	e := setupDestinations(t, api.Config{})
	var want []string
	for i := range 5 {
		k := "https://d" + notify.FormatID(int64(i)) + ".example.com:443"
		want = append(want, k)
		_, err := e.store.DestinationFailing(t.Context(), "webhook", k, "refused", time.Now())
		require.NoError(t, err)
	}
	var got []string
	next := e.url + "/destinations?limit=2"
	pages := 0
	for next != "" {
		r := do(t, http.MethodGet, next, nil, "")
		require.Equal(t, http.StatusOK, r.status, r.raw)
		var page struct {
			Items []struct {
				Key string `json:"key"`
			} `json:"items"`
			NextCursor string `json:"next_cursor"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.raw), &page))
		require.LessOrEqual(t, len(page.Items), 2)
		for _, it := range page.Items {
			got = append(got, it.Key)
		}
		next = ""
		if page.NextCursor != "" {
			next = e.url + "/destinations?limit=2&cursor=" + url.QueryEscape(page.NextCursor)
		}
		pages++
		require.Less(t, pages, 10)
	}
	require.Equal(t, want, got)
	require.Equal(t, 3, pages)

	first := do(t, http.MethodGet, e.url+"/destinations?limit=2", nil, "")
	var page struct {
		NextCursor string `json:"next_cursor"`
	}
	require.NoError(t, json.Unmarshal([]byte(first.raw), &page))
	for _, tc := range []struct{ query, code, field string }{
		{"limit=0", "invalid_field", "limit"},
		{"limit=501", "invalid_field", "limit"},
		{"limit=x", "invalid_field", "limit"},
		{"cursor=abc", "invalid_cursor", "cursor"},
		{"state=disabled&cursor=" + url.QueryEscape(page.NextCursor), "invalid_cursor", "cursor"},
		{"limit=1&limit=2", "invalid_field", "limit"},
	} {
		r := do(t, http.MethodGet, e.url+"/destinations?"+tc.query, nil, "")
		require.Equal(t, http.StatusBadRequest, r.status, tc.query)
		require.Equal(t, tc.code, r.errCode(), tc.query)
		require.Equal(t, tc.field, r.errField(), tc.query)
	}
}

// GET /notifications/{id} tells why a pending notification waits: its
// destination's record, in UTC; null once the destination is up again.
func TestNotificationWaiting(t *testing.T) {
	t.Parallel()
	hook := hookSpec
	hook.Destination = webhook.DestinationKey
	e := setupDestinations(t, api.Config{Channels: notify.Channels{notify.ChannelEmail: notify.EmailSpec, "webhook": hook}})
	r := do(t, http.MethodPost, e.url+"/notifications", jsonHeaders(), `{"user_id":"u","channel":"webhook","to":"https://hooks.example.com/a","body":{"a":1}}`)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	id := r.json["id"].(string)
	_, hasWaiting := r.json["waiting"]
	require.False(t, hasWaiting, "a create answers the notification as a listing shows it")

	get := do(t, http.MethodGet, e.url+"/notifications/"+id, nil, "")
	require.Equal(t, http.StatusOK, get.status)
	v, ok := get.json["waiting"]
	require.True(t, ok, "waiting is always there")
	require.Nil(t, v, "its destination is up")

	at := time.Date(2026, 5, 1, 14, 0, 0, 0, time.FixedZone("CEST", 2*3600))
	_, err := e.store.DestinationFailing(t.Context(), "webhook", "https://hooks.example.com:443", "webhook endpoint down: connection refused", at)
	require.NoError(t, err)
	get = do(t, http.MethodGet, e.url+"/notifications/"+id, nil, "")
	require.Equal(t, map[string]any{"destination": "https://hooks.example.com:443", "state": "failing",
		"reason": "webhook endpoint down: connection refused", "since": "2026-05-01T12:00:00Z"}, get.json["waiting"])
	require.Nil(t, get.json["last_error"], "no attempt was spent")

	require.NoError(t, e.store.EnableDestination(t.Context(), "https://hooks.example.com:443"))
	get = do(t, http.MethodGet, e.url+"/notifications/"+id, nil, "")
	require.Nil(t, get.json["waiting"])
}
