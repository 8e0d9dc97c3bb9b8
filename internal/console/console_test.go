package console

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/deadletter"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/sqlite"
)

func TestHistory(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) *time.Time { v := t0.Add(time.Duration(s) * time.Second); return &v }
	attempt := func(n, start int, outcome string) notify.Attempt {
		return notify.Attempt{Attempt: n, StartedAt: *at(start), FinishedAt: at(start + 1), Outcome: outcome}
	}
	statuses := func(h []historyEntry) (out []string) {
		for _, e := range h {
			out = append(out, e.Status+": "+e.Note)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		n    notify.Notification
		as   []notify.Attempt
		want []string
	}{
		{"created", notify.Notification{Status: notify.StatusPending}, nil, []string{"pending: created"}},
		{"retried then sent", notify.Notification{Status: notify.StatusSent},
			[]notify.Attempt{attempt(1, 1, notify.AttemptRetry), attempt(2, 30, notify.AttemptSent)},
			[]string{"pending: created", "pending: attempt 1 failed: retry scheduled", "sent: attempt 2 sent"}},
		{"dead", notify.Notification{Status: notify.StatusFailed, FailedAt: at(2)},
			[]notify.Attempt{attempt(1, 1, notify.AttemptDead)},
			[]string{"pending: created", "failed: attempt 1 failed for good: dead-lettered"}},
		{"redriven, waiting", notify.Notification{Status: notify.StatusPending, UpdatedAt: *at(60)},
			[]notify.Attempt{attempt(1, 1, notify.AttemptDead)},
			[]string{"pending: created", "failed: attempt 1 failed for good: dead-lettered", "pending: redriven: waiting for its next attempt"}},
		{"redriven and sent", notify.Notification{Status: notify.StatusSent},
			[]notify.Attempt{attempt(1, 1, notify.AttemptDead), attempt(2, 60, notify.AttemptSent)},
			[]string{"pending: created", "failed: attempt 1 failed for good: dead-lettered", "pending: redriven (shown at the next attempt's start)", "sent: attempt 2 sent"}},
		{"in flight", notify.Notification{Status: notify.StatusPending},
			[]notify.Attempt{{Attempt: 1, StartedAt: *at(1)}},
			[]string{"pending: created", "pending: attempt 1 in flight"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, statuses(history(tc.n, tc.as)))
		})
	}
}

func TestChart(t *testing.T) {
	start := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	ch := newChart(start, notify.Activity{
		Created:   map[time.Time]int64{start: 4, start.Add(59 * time.Minute): 2, start.Add(-time.Minute): 100},
		Delivered: map[time.Time]int64{start.Add(time.Minute): 3},
	})
	require.Len(t, ch.Rows, 60)
	require.EqualValues(t, 4, ch.Max, "a minute outside the hour is not drawn")
	require.Equal(t, start.Add(59*time.Minute), ch.Rows[0].Minute, "newest first")
	require.EqualValues(t, 2, ch.Rows[0].Created)
	require.EqualValues(t, 3, ch.Rows[58].Delivered)
	pts := strings.Fields(ch.Created)
	require.Len(t, pts, 60)
	require.Equal(t, "0.0,0.0", pts[0], "the largest value reaches the top")
	require.Equal(t, "600.0,75.0", pts[59])
	// The time axis: every ten minutes of the clock, in UTC, placed where
	// the minute is drawn; the edges' labels stay inside.
	require.Equal(t, []chartTick{
		{X: "0.00%", Label: "12:00", Anchor: "start"}, {X: "16.95%", Label: "12:10", Anchor: "middle"},
		{X: "33.90%", Label: "12:20", Anchor: "middle"}, {X: "50.85%", Label: "12:30", Anchor: "middle"},
		{X: "67.80%", Label: "12:40", Anchor: "middle"}, {X: "84.75%", Label: "12:50", Anchor: "middle"},
	}, ch.Ticks)
	tokyo := time.FixedZone("JST", 9*3600)
	late := newChart(time.Date(2026, 5, 1, 21, 1, 0, 0, tokyo), notify.Activity{})
	require.Len(t, late.Ticks, 6)
	require.Equal(t, chartTick{X: "15.25%", Label: "12:10", Anchor: "middle"}, late.Ticks[0], "in UTC whatever the zone")
	require.Equal(t, chartTick{X: "100.00%", Label: "13:00", Anchor: "end"}, late.Ticks[5])
}

// The list's time filters come from datetime-local inputs (no zone: UTC)
// or from links in RFC 3339; both reach the API's rules as RFC 3339, and
// the inputs show either in UTC.
func TestTimeFilters(t *testing.T) {
	for _, tc := range []struct{ in, query, input string }{
		{"2026-05-01T12:00", "2026-05-01T12:00:00Z", "2026-05-01T12:00:00"},
		{"2026-05-01T12:00:05", "2026-05-01T12:00:05Z", "2026-05-01T12:00:05"},
		{"2026-05-01T12:00:05.250", "2026-05-01T12:00:05.25Z", "2026-05-01T12:00:05"},
		{"2026-05-01T12:00:00Z", "2026-05-01T12:00:00Z", "2026-05-01T12:00:00"},
		{"2026-05-01T14:00:00+02:00", "2026-05-01T14:00:00+02:00", "2026-05-01T12:00:00"},
		{"yesterday", "yesterday", ""},
		{"2026-05-01", "2026-05-01", ""},
	} {
		t.Run(tc.in, func(t *testing.T) {
			q := utcFilters(url.Values{"created_after": {tc.in}, "user_id": {"2026-05-01T12:00"}})
			require.Equal(t, tc.query, q.Get("created_after"))
			require.Equal(t, "2026-05-01T12:00", q.Get("user_id"), "only the time filters")
			require.Equal(t, tc.input, dateInput(tc.in))
		})
	}
}

// openConsole serves a console without a token over a real SQLite store.
func openConsole(t *testing.T, token string) (*httptest.Server, *sqlite.Store) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "herald.db"), sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	require.NoError(t, st.Migrate(t.Context()))
	c, err := New(st, st, deadletter.New(st, nil), withFilters(Config{Token: token, SessionTTL: time.Hour, RefreshEvery: time.Second}))
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	return srv, st
}

func newClient(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{Jar: jar}
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func read(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// Without a token the console needs no login, but its forms still carry a
// CSRF token, and every page its CSP.
func TestWithoutToken(t *testing.T) {
	t.Parallel()
	srv, _ := openConsole(t, "")
	cl := newClient(t)
	resp, err := cl.Get(srv.URL + "/ui/login")
	require.NoError(t, err)
	read(t, resp)
	require.Equal(t, "/ui/", resp.Request.URL.Path, "no login without a token")
	csp := resp.Header.Get("Content-Security-Policy")
	require.Contains(t, csp, "script-src 'self'")
	require.NotContains(t, csp, "unsafe-inline")

	resp, err = cl.Get(srv.URL + "/ui/dead-letters")
	require.NoError(t, err)
	page := read(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	m := csrfInput.FindStringSubmatch(page)
	require.NotNil(t, m, "the dead-letter form carries a CSRF token")

	form := url.Values{"all": {"1"}}
	resp, err = cl.PostForm(srv.URL+"/ui/dead-letters/redrive", form)
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token")
	read(t, resp)

	form.Set("csrf", m[1])
	resp, err = newClient(t).PostForm(srv.URL+"/ui/dead-letters/redrive", form)
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "the token without its cookie (another browser)")
	read(t, resp)

	req, err := http.NewRequest(http.MethodPost, srv.URL+"/ui/dead-letters/redrive", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://elsewhere.example")
	resp, err = cl.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "a request from another origin")
	read(t, resp)

	resp, err = cl.PostForm(srv.URL+"/ui/dead-letters/redrive", form)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, read(t, resp), "0 notifications will be sent again")
}

// The assets are served from the binary, and no page holds inline script.
func TestAssetsAndNoInlineScript(t *testing.T) {
	t.Parallel()
	srv, st := openConsole(t, "")
	_, err := st.Create(t.Context(), notify.NewNotification{Request: notify.CreateRequest{
		UserID: "u", Channel: notify.ChannelEmail, To: "a@example.com", Subject: `"><script>alert(1)</script>`, Body: "<b>hi</b>",
	}})
	require.NoError(t, err)
	for path, typ := range map[string]string{"/ui/assets/console.js": "javascript", "/ui/assets/console.css": "text/css"} {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		require.NotEmpty(t, read(t, resp))
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.Contains(t, resp.Header.Get("Content-Type"), typ, path)
	}
	inline := regexp.MustCompile(`<script(?:\s[^>]*)?>|\son[a-z]+=|style=`)
	for _, path := range []string{"/ui/", "/ui/overview", "/ui/notifications", "/ui/notifications/1", "/ui/dead-letters", "/ui/nowhere"} {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		page := read(t, resp)
		for _, tag := range inline.FindAllString(page, -1) {
			require.Equal(t, `<script src="/ui/assets/console.js" defer>`, tag, path)
		}
		require.NotContains(t, page, "<script>alert", path)
		require.NotContains(t, page, "<b>hi</b>", path)
	}
}

// The overview says what this process knows of the senders: nothing in
// herald api (no worker here), the worker's state in herald serve.
func TestOverviewSenders(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "herald.db"), sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	require.NoError(t, st.Migrate(t.Context()))
	for _, tc := range []struct {
		name    string
		senders func() ([]SenderState, bool)
		want    []string
	}{
		{"api", nil, []string{"Not in this process"}},
		{"api with a seam", func() ([]SenderState, bool) { return nil, false }, []string{"Not in this process"}},
		{"serve, up", func() ([]SenderState, bool) { return []SenderState{{Channel: "email", Up: true}}, true },
			[]string{"<td data-label=\"Channel\">email</td>", "status-sent\">up<"}},
		{"serve, throttled", func() ([]SenderState, bool) {
			return []SenderState{{Channel: "email", Reason: "mail server throttled: 421 <try later>"}}, true
		}, []string{"<td data-label=\"Channel\">email</td>", "paused", "mail server throttled: 421 &lt;try later&gt;"}},
		{"serve, throttled until", func() ([]SenderState, bool) {
			return []SenderState{{Channel: "telegram", Class: "throttled", Reason: "Telegram Bot API throttled: 429",
				Until: time.Date(2026, 12, 1, 20, 0, 5, 0, time.UTC)}, {Channel: "webhook", Up: true, PausedDestinations: 2}}, true
		}, []string{"<td data-label=\"Channel\">telegram</td>", ">throttled</span> until <time datetime=\"2026-12-01T20:00:05Z\"", "<td data-label=\"Channel\">webhook</td>", "<td data-label=\"Paused destinations\">2</td>"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(st, st, deadletter.New(st, nil), withFilters(Config{Senders: tc.senders, SessionTTL: time.Hour, RefreshEvery: time.Second}))
			require.NoError(t, err)
			srv := httptest.NewServer(c)
			defer srv.Close()
			resp, err := http.Get(srv.URL + "/ui/overview")
			require.NoError(t, err)
			page := read(t, resp)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			for _, w := range tc.want {
				require.Contains(t, page, w)
			}
		})
	}
}

// The list filters by channel, with the channels the API takes as its
// choices; an unknown one is shown next to its field.
func TestListByChannel(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "herald.db"), sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	require.NoError(t, st.Migrate(t.Context()))
	channels := notify.Channels{notify.ChannelEmail: notify.EmailSpec, "webhook": {JSONBody: true, To: "an http(s) URL"}}
	c, err := New(st, st, deadletter.New(st, nil), withFilters(Config{Channels: channels, SessionTTL: time.Hour, RefreshEvery: time.Second}))
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	for _, r := range []notify.CreateRequest{
		{UserID: "u", Channel: notify.ChannelEmail, To: "a@example.com", Subject: "s", Body: "b"},
		{UserID: "u", Channel: "webhook", To: "https://hooks.example.com/in", Body: `{"a":1}`},
	} {
		_, err := st.Create(t.Context(), notify.NewNotification{Request: r})
		require.NoError(t, err)
	}
	resp, err := http.Get(srv.URL + "/ui/notifications?channel=webhook")
	require.NoError(t, err)
	page := read(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, page, "hooks.example.com")
	require.NotContains(t, page, "a@example.com")
	require.Contains(t, page, "<option selected>webhook</option>")
	require.Contains(t, page, "<option>email</option>")

	resp, err = http.Get(srv.URL + "/ui/notifications?channel=pigeon")
	require.NoError(t, err)
	page = read(t, resp)
	require.Regexp(t, `(?s)id="channel".*class="[^"]*error[^"]*"[^>]*>[^<]*channel`, page)
	require.NotContains(t, page, "hooks.example.com")
}

// The Destinations page lists the records with their pending counts, and
// its Enable button (a POST with the CSRF token) removes one.
func TestDestinationsPage(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "herald.db"), sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	require.NoError(t, st.Migrate(t.Context()))
	c, err := New(st, st, deadletter.New(st, nil), withFilters(Config{SessionTTL: time.Hour, RefreshEvery: time.Second, Destinations: st}))
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)

	const key = "https://hooks.example.com:443"
	for i := range 2 {
		_, err := st.Create(t.Context(), notify.NewNotification{Destination: key, Request: notify.CreateRequest{
			UserID: "u", Channel: "webhook", To: "https://hooks.example.com/h" + strings.Repeat("x", i), Body: "{}"}})
		require.NoError(t, err)
	}
	_, err = st.DestinationFailing(t.Context(), "webhook", key, "cannot connect <refused>", time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	require.NoError(t, err)

	cl := newClient(t)
	resp, err := cl.Get(srv.URL + "/ui/destinations")
	require.NoError(t, err)
	page := read(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, page, `<td data-label="Key">`+key+`</td>`)
	require.Contains(t, page, "status-failing")
	require.Contains(t, page, `<td data-label="Pending">2</td>`)
	require.Contains(t, page, "cannot connect &lt;refused&gt;", "the reason is escaped")
	require.Contains(t, page, `datetime="2026-05-01T12:00:00Z"`)
	m := csrfInput.FindStringSubmatch(page)
	require.NotNil(t, m, "the Enable form carries a CSRF token")

	resp, err = cl.PostForm(srv.URL+"/ui/destinations/enable", url.Values{"key": {key}})
	require.NoError(t, err)
	read(t, resp)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token")
	ds, err := st.ListDestinations(t.Context(), notify.DestinationFilter{Limit: 10})
	require.NoError(t, err)
	require.Len(t, ds.Items, 1, "a refused POST changes nothing")

	resp, err = cl.PostForm(srv.URL+"/ui/destinations/enable", url.Values{"key": {key}, "csrf": {m[1]}})
	require.NoError(t, err)
	page = read(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, page, "Enabled "+key)
	require.Contains(t, page, "Every destination is up.")
	ds, err = st.ListDestinations(t.Context(), notify.DestinationFilter{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, ds.Items)

	resp, err = cl.PostForm(srv.URL+"/ui/destinations/enable", url.Values{"key": {key}, "csrf": {m[1]}})
	require.NoError(t, err)
	page = read(t, resp)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Contains(t, page, "it is up")

	// Without Config.Destinations there is no page, and no link to it.
	plain, _ := openConsole(t, "")
	resp, err = newClient(t).Get(plain.URL + "/ui/")
	require.NoError(t, err)
	require.NotContains(t, read(t, resp), "/ui/destinations")
}

// withFilters gives cfg the API's listing parsers, as cmd/herald does.
func withFilters(cfg Config) Config {
	cfg.Filters = Filters{Notifications: api.ParseListFilter, Destinations: api.ParseDestinationFilter}
	return cfg
}
