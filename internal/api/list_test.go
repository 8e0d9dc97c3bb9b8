package api_test

import (
	"encoding/json"
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

// createN creates n notifications, user_id u-0, u-1, u-0, ..., and returns
// their ids in creation order.
func createN(t *testing.T, e *env, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		r := do(t, http.MethodPost, e.url+"/notifications", jsonHeaders(), body(t, map[string]any{"user_id": "u-" + strconv.Itoa(i%2)}))
		require.Equal(t, http.StatusCreated, r.status, r.raw)
		ids = append(ids, r.json["id"].(string))
	}
	return ids
}

func itemIDs(r reply) []string {
	var out []string
	for _, it := range r.json["items"].([]any) {
		out = append(out, it.(map[string]any)["id"].(string))
	}
	return out
}

// listAll follows next_cursor from query to the end and returns the ids.
func listAll(t *testing.T, e *env, query string) []string {
	t.Helper()
	var got []string
	cursor := ""
	for range 100 {
		q := query
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		r := do(t, http.MethodGet, e.url+"/notifications?"+q, nil, "")
		require.Equal(t, http.StatusOK, r.status, r.raw)
		got = append(got, itemIDs(r)...)
		for _, it := range r.json["items"].([]any) {
			require.NotContains(t, it, "body", "a listing leaves the body out")
		}
		next, ok := r.json["next_cursor"].(string)
		if !ok {
			require.NotContains(t, r.raw, "next_cursor", "no cursor when done")
			return got
		}
		cursor = next
	}
	t.Fatal("the listing does not end")
	return nil
}

func reversed(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}

func TestList(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{})
	empty := do(t, http.MethodGet, e.url+"/notifications", nil, "")
	require.Equal(t, http.StatusOK, empty.status)
	require.JSONEq(t, `{"items":[]}`, empty.raw)

	ids := createN(t, e, 7)
	require.Equal(t, reversed(ids), listAll(t, e, "limit=50"), "newest first")
	require.Equal(t, reversed(ids), listAll(t, e, "limit=2"), "pages of 2")
	require.Equal(t, reversed(ids), listAll(t, e, ""), "the default limit")
	var u1 []string
	for i, id := range ids {
		if i%2 == 1 {
			u1 = append(u1, id)
		}
	}
	require.Equal(t, reversed(u1), listAll(t, e, "user_id=u-1&status=pending&limit=1"))
	require.Empty(t, listAll(t, e, "status=failed"))
	require.Empty(t, listAll(t, e, "created_before=2000-01-01T00:00:00Z"))
	require.Equal(t, reversed(ids), listAll(t, e, "created_after=2000-01-01T00:00:00%2B02:00&created_before=9999-01-01T00:00:00Z&limit=3"))

	// The limit may change between pages; the filters may not.
	first := do(t, http.MethodGet, e.url+"/notifications?user_id=u-0&limit=1", nil, "")
	cursor := first.json["next_cursor"].(string)
	r := do(t, http.MethodGet, e.url+"/notifications?user_id=u-0&limit=10&cursor="+url.QueryEscape(cursor), nil, "")
	require.Equal(t, http.StatusOK, r.status)
	require.Len(t, itemIDs(r), 3)
	for _, other := range []string{"user_id=u-1", "", "user_id=u-0&status=pending", "user_id=u-0&created_after=2000-01-01T00:00:00Z"} {
		r := do(t, http.MethodGet, e.url+"/notifications?"+other+"&cursor="+url.QueryEscape(cursor), nil, "")
		requireError(t, r, http.StatusBadRequest, "invalid_cursor", "cursor")
		require.Contains(t, r.raw, "other filters")
	}
	// The same instant written another way is the same filter.
	c2 := do(t, http.MethodGet, e.url+"/notifications?created_after=2000-01-01T00:00:00Z&limit=1", nil, "").json["next_cursor"].(string)
	r = do(t, http.MethodGet, e.url+"/notifications?created_after=2000-01-01T01:00:00%2B01:00&cursor="+url.QueryEscape(c2), nil, "")
	require.Equal(t, http.StatusOK, r.status, r.raw)

	// GET by id has the body.
	one := do(t, http.MethodGet, e.url+"/notifications/"+ids[0], nil, "")
	require.Equal(t, "Line one\nLine two", one.json["body"])
}

// Every bad query parameter answers 400 naming it; none answers 500.
func TestListRejectsBadInput(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{})
	createN(t, e, 3)
	cursor := do(t, http.MethodGet, e.url+"/notifications?limit=1", nil, "").json["next_cursor"].(string)
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	for _, tc := range []struct{ query, code, field string }{
		{"limit=0", "invalid_field", "limit"},
		{"limit=-1", "invalid_field", "limit"},
		{"limit=501", "invalid_field", "limit"},
		{"limit=99999999999999999999999", "invalid_field", "limit"},
		{"limit=abc", "invalid_field", "limit"},
		{"limit=1e2", "invalid_field", "limit"},
		{"limit=+5", "invalid_field", "limit"},
		{"limit=%205", "invalid_field", "limit"},
		{"limit=", "invalid_field", "limit"},
		{"limit=5&limit=6", "invalid_field", "limit"},
		{"status=Pending", "invalid_field", "status"},
		{"status=lost", "invalid_field", "status"},
		{"status=", "invalid_field", "status"},
		{"user_id=", "invalid_field", "user_id"},
		{"user_id=a%00b", "invalid_field", "user_id"},
		{"user_id=%FF", "invalid_field", "user_id"},
		{"user_id=" + strings.Repeat("x", 256), "invalid_field", "user_id"},
		{"created_after=2026-01-01", "invalid_field", "created_after"},
		{"created_after=yesterday", "invalid_field", "created_after"},
		{"created_after=1714560000", "invalid_field", "created_after"},
		{"created_before=2026-13-01T00:00:00Z", "invalid_field", "created_before"},
		{"created_after=2026-01-02T00:00:00Z&created_before=2026-01-01T00:00:00Z", "invalid_field", "created_before"},
		{"created_after=2026-01-01T00:00:00Z&created_before=2026-01-01T00:00:00Z", "invalid_field", "created_before"},
		{"userid=u-1", "unknown_field", "userid"},
		{"cursor=", "invalid_cursor", "cursor"},
		{"cursor=not-a-cursor", "invalid_cursor", "cursor"},
		{"cursor=" + url.QueryEscape(flip(cursor, 5)), "invalid_cursor", "cursor"},
		{"cursor=" + url.QueryEscape(cursor[:len(cursor)-2]), "invalid_cursor", "cursor"},
		{"cursor=" + strings.Repeat("A", 600), "invalid_cursor", "cursor"},
		{"cursor=" + url.QueryEscape(cursor) + "&cursor=" + url.QueryEscape(cursor), "invalid_field", "cursor"},
		{"cursor=" + url.QueryEscape(cursor) + "&status=sent", "invalid_cursor", "cursor"},
	} {
		r := do(t, http.MethodGet, e.url+"/notifications?"+tc.query, nil, "")
		requireError(t, r, http.StatusBadRequest, tc.code, tc.field)
	}
}

func TestAttempts(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{})
	ids := createN(t, e, 2)
	r := do(t, http.MethodGet, e.url+"/notifications/"+ids[0]+"/attempts", nil, "")
	require.Equal(t, http.StatusOK, r.status)
	require.JSONEq(t, `{"items":[]}`, r.raw)

	id, _ := strconv.ParseInt(ids[0], 10, 64)
	e.addAttempt(t, id, 1, 10, "retry", "451 later", true)
	e.addAttempt(t, id, 1, 11, "deferred", "dial tcp: refused", true)
	e.addAttempt(t, id, 2, 11, "", "", false)
	r = do(t, http.MethodGet, e.url+"/notifications/"+ids[0]+"/attempts", nil, "")
	require.Equal(t, http.StatusOK, r.status)
	items := r.json["items"].([]any)
	require.Len(t, items, 3)
	first, last := items[0].(map[string]any), items[2].(map[string]any)
	require.EqualValues(t, 1, first["attempt"])
	require.Equal(t, "10", first["message_id"])
	require.Equal(t, "retry", first["outcome"])
	require.Equal(t, "451 later", first["error"])
	require.NotNil(t, first["finished_at"])
	require.Equal(t, "deferred", items[1].(map[string]any)["outcome"])
	for _, k := range []string{"finished_at", "outcome", "error"} {
		v, ok := last[k]
		require.True(t, ok, "%s is present", k)
		require.Nil(t, v, "%s is null while in flight", k)
	}
	other := do(t, http.MethodGet, e.url+"/notifications/"+ids[1]+"/attempts", nil, "")
	require.JSONEq(t, `{"items":[]}`, other.raw)

	for _, bad := range []string{"999", "0", "-1", "abc", "99999999999999999999"} {
		requireError(t, do(t, http.MethodGet, e.url+"/notifications/"+bad+"/attempts", nil, ""), http.StatusNotFound, "not_found", "")
	}
}

// GET /notifications/{id}/attempts pages with limit and cursor: a full
// page names next_cursor, the last none; a cursor of another
// notification's attempts is refused; a folded deferral shows its repeats
// and last_at.
func TestAttemptsPaging(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{})
	ids := createN(t, e, 2)
	id, _ := strconv.ParseInt(ids[0], 10, 64)
	for i := range 5 {
		e.addAttempt(t, id, i+1, int64(10+i), "retry", "e"+strconv.Itoa(i), true)
	}
	var got []string
	next := e.url + "/notifications/" + ids[0] + "/attempts?limit=2"
	var cursor string
	for pages := 0; next != ""; pages++ {
		require.Less(t, pages, 3)
		r := do(t, http.MethodGet, next, nil, "")
		require.Equal(t, http.StatusOK, r.status, r.raw)
		for _, it := range r.json["items"].([]any) {
			got = append(got, it.(map[string]any)["error"].(string))
		}
		next = ""
		if c, ok := r.json["next_cursor"].(string); ok {
			cursor = c
			next = e.url + "/notifications/" + ids[0] + "/attempts?limit=2&cursor=" + url.QueryEscape(c)
		}
	}
	require.Equal(t, []string{"e0", "e1", "e2", "e3", "e4"}, got)

	for _, tc := range []struct{ query, code, field string }{
		{"limit=0", "invalid_field", "limit"},
		{"limit=501", "invalid_field", "limit"},
		{"cursor=xyz", "invalid_cursor", "cursor"},
		{"order=desc", "unknown_field", "order"},
	} {
		r := do(t, http.MethodGet, e.url+"/notifications/"+ids[0]+"/attempts?"+tc.query, nil, "")
		requireError(t, r, http.StatusBadRequest, tc.code, tc.field)
	}
	// Another notification's cursor.
	r := do(t, http.MethodGet, e.url+"/notifications/"+ids[1]+"/attempts?cursor="+url.QueryEscape(cursor), nil, "")
	requireError(t, r, http.StatusBadRequest, "invalid_cursor", "cursor")

	// A folded deferral.
	_, err := e.writer(t).Exec(`INSERT INTO delivery_attempts (notification_id, message_id, attempt, started_at, finished_at, outcome, error, deferral, repeats, last_at)
		VALUES (?, 20, 1, '2026-05-01T12:00:00.000000Z', '2026-05-01T12:00:01.000000Z', 'deferred', 'refused', 'down', 53, '2026-05-01T12:32:00.000000Z')`, ids[1])
	require.NoError(t, err)
	r = do(t, http.MethodGet, e.url+"/notifications/"+ids[1]+"/attempts", nil, "")
	require.Equal(t, http.StatusOK, r.status)
	require.JSONEq(t, `{"items":[{"attempt":1,"message_id":"20","started_at":"2026-05-01T12:00:00Z","finished_at":"2026-05-01T12:00:01Z",
		"outcome":"deferred","error":"refused","repeats":53,"last_at":"2026-05-01T12:32:00Z"}]}`, r.raw)
}

// A redrive names why each id it was given was not redriven, and refuses
// all together with ids.
func TestRedriveReportsSkips(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{})
	a, err := api.New(e.store, api.Config{DeadLetters: deadletter.New(e.store, nil)})
	require.NoError(t, err)
	post := func(body string) reply {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "/dead-letters/redrive", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		return serve(t, a.Handler(), req)
	}
	ids := createN(t, e, 4)
	for _, i := range []int{0, 1, 2} {
		id, _ := strconv.ParseInt(ids[i], 10, 64)
		e.fail(t, id, "550 no")
	}
	// ids[0] and ids[1] are failed and the limit of 1 leaves one of them
	// out; ids[3] is pending; 999 does not exist; ids[0], named twice, is
	// reported once.
	r := post(`{"ids":["` + ids[0] + `","` + ids[3] + `","999","` + ids[1] + `","` + ids[0] + `"],"limit":1}`)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.EqualValues(t, 1, r.json["selected"])
	redriven := r.json["redriven"].([]any)
	require.Len(t, redriven, 1)
	var skipped []string
	for _, s := range r.json["skipped"].([]any) {
		m := s.(map[string]any)
		skipped = append(skipped, m["id"].(string)+":"+m["reason"].(string))
	}
	left := ids[1]
	if redriven[0] == ids[1] {
		left = ids[0]
	}
	require.ElementsMatch(t, []string{ids[3] + ":not_failed", "999:not_found", left + ":filtered_out"}, skipped)

	r = post(`{"ids":["` + ids[2] + `"],"all":true}`)
	requireError(t, r, http.StatusBadRequest, "invalid_field", "all")
	r = post(`{"all":true,"dry_run":true}`)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.JSONEq(t, `[]`, mustJSON(t, r.json["skipped"]))
}

// serve runs one request through h without a socket.
func serve(t *testing.T, h http.Handler, req *http.Request) reply {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	r := reply{status: w.Code, header: w.Header(), raw: w.Body.String()}
	var v any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &v), "reply %s", r.raw)
	r.json, _ = v.(map[string]any)
	return r
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
