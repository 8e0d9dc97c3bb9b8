package console

import (
	"context"
	"database/sql"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/heraldhq/herald/internal/deadletter"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/sqlite"
)

// guarded is a console over a SQLite store holding one dead letter.
type guarded struct {
	srv  *httptest.Server
	st   *sqlite.Store
	db   *sql.DB
	id   string
	port string
}

func openGuarded(t *testing.T, cfg Config) *guarded {
	t.Helper()
	path := filepath.Join(t.TempDir(), "herald.db")
	st, err := sqlite.Open(t.Context(), path, sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	require.NoError(t, st.Migrate(t.Context()))
	cfg.SessionTTL, cfg.RefreshEvery = time.Hour, time.Second
	c, err := New(st, st, deadletter.New(st, nil), withFilters(cfg))
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	n, err := st.Create(t.Context(), notify.NewNotification{Request: notify.CreateRequest{
		UserID: "u", Channel: notify.ChannelEmail, To: "a@example.com", Subject: "s", Body: "b"}})
	require.NoError(t, err)
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	now := time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")
	_, err = db.Exec(`UPDATE notifications SET status = 'failed', attempts = 1, last_error = '550 no', failed_at = ?, updated_at = ? WHERE id = ?`, now, now, n.Notification.ID)
	require.NoError(t, err)
	u, _ := url.Parse(srv.URL)
	return &guarded{srv: srv, st: st, db: db, id: notify.FormatID(n.Notification.ID), port: u.Port()}
}

func (g *guarded) status(t *testing.T) string {
	t.Helper()
	var s string
	require.NoError(t, g.db.QueryRow(`SELECT status FROM notifications WHERE id = ?`, g.id).Scan(&s))
	return s
}

// as sends a request to the console with the Host and Origin a browser
// on host sends.
func (g *guarded) as(t *testing.T, cl *http.Client, host, method, path string, form url.Values, cookie *http.Cookie) (*http.Response, string) {
	t.Helper()
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	req, err := http.NewRequest(method, g.srv.URL+path, body)
	require.NoError(t, err)
	req.Host = host
	if cookie != nil {
		req.AddCookie(cookie)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "http://"+host)
	}
	resp, err := cl.Do(req)
	require.NoError(t, err)
	return resp, read(t, resp)
}

// DNS rebinding: a page on attacker.example, rebound to the console's
// address, gets neither a page nor a CSRF token, and cannot redrive even
// with a token its browser got on the console's own name; the dead letter
// stays failed. The console's own names, and a listed one, pass.
func TestRebindingRefused(t *testing.T) {
	t.Parallel()
	g := openGuarded(t, Config{AllowedHosts: []string{"herald.example.com"}})
	cl := newClient(t)
	evil := "attacker.example:" + g.port

	for _, path := range []string{"/ui/", "/ui/dead-letters", "/ui/login", "/ui/notifications/" + g.id, "/ui/assets/console.js"} {
		resp, page := g.as(t, cl, evil, http.MethodGet, path, nil, nil)
		require.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode, path)
		require.Empty(t, resp.Header.Values("Set-Cookie"), "%s: no CSRF cookie for a foreign Host", path)
		require.NotContains(t, page, `name="csrf"`, path)
		require.Contains(t, page, `"attacker.example:`+g.port+`"`)
		require.Contains(t, page, "HERALD_ALLOWED_HOSTS")
		require.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"))
	}

	// A CSRF token and its cookie, got on the console's own address, sent
	// by hand (a browser keeps cookies by name and would not send them).
	token, cookie := g.csrf(t, cl, "127.0.0.1:"+g.port)
	redrive := url.Values{"all": {"1"}, "step": {"redrive"}, "csrf": {token}}
	for _, host := range []string{evil, "attacker.example", "herald.example.com.attacker.example:" + g.port} {
		resp, _ := g.as(t, newClient(t), host, http.MethodPost, "/ui/dead-letters/redrive", redrive, cookie)
		require.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode, host)
	}
	require.Equal(t, "failed", g.status(t), "nothing was redriven")

	// The console's own names and the listed one: the form passes (a dry
	// run, then the redrive).
	for _, host := range []string{"localhost:" + g.port, "[::1]:" + g.port, "127.0.0.1", "herald.example.com"} {
		token, _ := g.csrf(t, cl, host)
		resp, page := g.as(t, cl, host, http.MethodPost, "/ui/dead-letters/redrive", url.Values{"all": {"1"}, "csrf": {token}}, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", host, regexpMain.FindString(page))
		require.Contains(t, page, "1 notification", host)
	}
	token, _ = g.csrf(t, cl, "HERALD.example.com:"+g.port)
	redrive.Set("csrf", token)
	resp, page := g.as(t, cl, "HERALD.example.com:"+g.port, http.MethodPost, "/ui/dead-letters/redrive", redrive, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, regexpMain.FindString(page))
	require.Equal(t, "pending", g.status(t), "redriven through a listed name")
}

// csrf loads the dead letters through host and returns the form's CSRF
// token and the cookie it goes with.
func (g *guarded) csrf(t *testing.T, cl *http.Client, host string) (string, *http.Cookie) {
	t.Helper()
	resp, page := g.as(t, cl, host, http.MethodGet, "/ui/dead-letters", nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, host)
	m := csrfInput.FindStringSubmatch(page)
	require.NotNil(t, m, host)
	for _, ck := range cl.Jar.Cookies(&url.URL{Scheme: "http", Host: host, Path: "/ui/"}) {
		if ck.Name == csrfCookie {
			return m[1], ck
		}
	}
	t.Fatalf("no CSRF cookie for %s", host)
	return "", nil
}

// A form whose Origin names a host the console does not answer to is
// refused even when the request's Host says the same: the Host check and
// the CSRF check each hold on their own.
func TestCSRFOriginAllowedHosts(t *testing.T) {
	t.Parallel()
	g := openGuarded(t, Config{})
	c, err := New(g.st, g.st, deadletter.New(g.st, nil), withFilters(Config{SessionTTL: time.Hour, RefreshEvery: time.Second}))
	require.NoError(t, err)
	for host, want := range map[string]bool{"127.0.0.1:8080": true, "localhost:8080": true, "attacker.example:8080": false} {
		r := httptest.NewRequest(http.MethodPost, "http://"+host+"/ui/dead-letters/redrive", strings.NewReader("csrf="+strings.Repeat("a", 64)))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Origin", "http://"+host)
		r.AddCookie(&http.Cookie{Name: csrfCookie, Value: strings.Repeat("a", 64)})
		require.Equal(t, want, c.checkCSRF(r), host)
	}
}

// clientFrom is an HTTP client whose connections come from the loopback
// address ip, with its own cookie jar.
func clientFrom(t *testing.T, ip string) *http.Client {
	t.Helper()
	cl := newClient(t)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	cl.Transport = &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}}
	t.Cleanup(cl.CloseIdleConnections)
	return cl
}

// login gets the login form's CSRF token, then posts token; it returns the
// reply's status, its Retry-After and its page.
func login(t *testing.T, cl *http.Client, base, token string) (int, string, string) {
	t.Helper()
	resp, err := cl.Get(base + "/ui/login")
	require.NoError(t, err)
	page := read(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, page)
	m := csrfInput.FindStringSubmatch(page)
	require.NotNil(t, m)
	noRedirect := *cl
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err = noRedirect.PostForm(base+"/ui/login", url.Values{"csrf": {m[1]}, "token": {token}})
	require.NoError(t, err)
	return resp.StatusCode, resp.Header.Get("Retry-After"), read(t, resp)
}

// Failed logins are limited per client address and over all addresses:
// past either, 429 with Retry-After, and not even the right token is
// checked; the metrics count failures and throttled logins.
func TestLoginThrottled(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	g := openGuarded(t, Config{Token: "s3cret", Registerer: reg,
		LoginPerAddress: LoginLimit{Every: time.Hour, Burst: 3}, LoginGlobal: LoginLimit{Every: time.Hour, Burst: 5}})
	base := g.srv.URL
	a, b, c := clientFrom(t, "127.0.0.1"), clientFrom(t, "127.0.0.2"), clientFrom(t, "127.0.0.3")

	for range 3 {
		code, _, page := login(t, a, base, "guess")
		require.Equal(t, http.StatusUnauthorized, code, page)
	}
	code, after, page := login(t, a, base, "guess")
	require.Equal(t, http.StatusTooManyRequests, code, page)
	require.Contains(t, page, "Too many failed logins from your address")
	secs, err := strconv.Atoi(after)
	require.NoError(t, err, "Retry-After %q", after)
	require.Greater(t, secs, 3000, "a turn comes back after an hour")
	code, _, _ = login(t, a, base, "s3cret")
	require.Equal(t, http.StatusTooManyRequests, code, "throttled: the token is not even compared")

	// Another address has its own turns, until all addresses together
	// reach the global limit.
	for range 2 {
		code, _, page := login(t, b, base, "guess")
		require.Equal(t, http.StatusUnauthorized, code, page)
	}
	code, after, page = login(t, c, base, "s3cret")
	require.Equal(t, http.StatusTooManyRequests, code, page)
	require.Contains(t, page, "Too many failed logins to this console")
	require.NotEmpty(t, after)

	require.Equal(t, 5.0, testutil.ToFloat64(g.consoleMetric(t, reg, "herald_console_login_failures_total")))
	throttled := g.consoleMetric(t, reg, "herald_console_login_throttled_total").(*prometheus.CounterVec)
	require.Equal(t, 2.0, testutil.ToFloat64(throttled.WithLabelValues("address")))
	require.Equal(t, 1.0, testutil.ToFloat64(throttled.WithLabelValues("global")))
}

// consoleMetric finds one of the console's collectors by registering a
// twin: the registry answers with the one it holds.
func (g *guarded) consoleMetric(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	var twin prometheus.Collector
	if name == "herald_console_login_throttled_total" {
		twin = prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: "Console logins answered 429 before the token was checked, by the limit that was reached: address or global."}, []string{"limit"})
	} else {
		twin = prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: "Console logins refused for a wrong token."})
	}
	err := reg.Register(twin)
	var are prometheus.AlreadyRegisteredError
	require.ErrorAs(t, err, &are, name)
	return are.ExistingCollector
}

// Right tokens give their turn back: an operator who logs in often is
// never throttled, while failures still are.
func TestLoginSuccessNotCounted(t *testing.T) {
	t.Parallel()
	g := openGuarded(t, Config{Token: "s3cret", LoginPerAddress: LoginLimit{Every: time.Hour, Burst: 2}, LoginGlobal: LoginLimit{Every: time.Hour, Burst: 2}})
	cl := newClient(t)
	for range 6 {
		code, _, page := login(t, cl, g.srv.URL, "s3cret")
		require.Equal(t, http.StatusSeeOther, code, page)
		cl = newClient(t) // logged out: a fresh browser
	}
	for range 2 {
		code, _, _ := login(t, cl, g.srv.URL, "guess")
		require.Equal(t, http.StatusUnauthorized, code)
	}
	code, _, _ := login(t, cl, g.srv.URL, "guess")
	require.Equal(t, http.StatusTooManyRequests, code)
}

// The per-address limit remembers a bounded number of addresses, an IPv6
// address by its /64.
func TestLoginAddressesBounded(t *testing.T) {
	t.Parallel()
	th, err := newLoginThrottle(LoginLimit{Every: time.Hour, Burst: 1}, LoginLimit{Every: time.Nanosecond, Burst: 1000}, 3, nil)
	require.NoError(t, err)
	from := func(addr string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/ui/login", nil)
		r.RemoteAddr = addr
		return r
	}
	_, wait, _ := th.take(from("[2001:db8::1]:5000"))
	require.Zero(t, wait)
	_, wait, limit := th.take(from("[2001:db8::2]:5001"))
	require.Positive(t, wait, "the same /64")
	require.Equal(t, "address", limit)
	for i := range 10 {
		_, wait, _ := th.take(from("192.0.2." + strconv.Itoa(i) + ":1"))
		require.Zero(t, wait)
	}
	require.LessOrEqual(t, len(th.byAddr), 3)
	require.Equal(t, len(th.byAddr), th.recent.Len())
}

var regexpMain = regexp.MustCompile(`(?s)<main.*</main>`)
