package console

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/pgtest"
	"github.com/heraldhq/herald/internal/testkit/proctest"
	"github.com/heraldhq/herald/internal/testkit/smtptest"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// The browser tests drive Debian's chromium, headless, through chromedp
// against a real herald serve (the binary, on PostgreSQL, with a real SMTP
// server), as an operator would use the console. One browser serves the
// whole package; each test opens its own browser context (cookies of its
// own).

var update = flag.Bool("update", false, "rewrite the screenshots in docs/console from the browser test")

// chromiumVar names a browser binary other than the one found on PATH.
const chromiumVar = "HERALD_TEST_CHROMIUM"

var (
	browserOnce   sync.Once
	browserCtx    context.Context
	browserCancel context.CancelFunc
	browserErr    error

	binOnce   sync.Once
	binPath   string
	removeBin func()
	binErr    error
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if browserCancel != nil {
		browserCancel()
	}
	if removeBin != nil {
		removeBin()
	}
	os.Exit(code)
}

// chromium finds the browser, or skips the test (fails it when services
// are required: make test installs chromium).
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(chromiumVar); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(testenv.RequireVar) == "1" {
		t.Fatalf("chromium is not installed and %s=1: the console's browser tests must run (scripts/services.sh installs it)", testenv.RequireVar)
	}
	t.Skipf("chromium is not installed (or set %s); skipping the console's browser tests", chromiumVar)
	return ""
}

// tab is one browser context of the package's browser, with one page.
type tab struct {
	t      *testing.T
	ctx    context.Context
	dialog atomic.Bool // a script opened a dialog (alert): an XSS ran
}

// startBrowser starts the package's one browser, once.
func startBrowser(path string) {
	browserOnce.Do(func() {
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(path),
			chromedp.Flag("headless", "new"),
			chromedp.NoSandbox,
			chromedp.WindowSize(1280, 900),
		)
		alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancel := chromedp.NewContext(alloc)
		browserCtx = ctx
		browserCancel = func() { cancel(); cancelAlloc() }
		// The first run starts the browser; it lives as long as ctx.
		browserErr = chromedp.Do(ctx)
	})
}

func newTab(t *testing.T) *tab {
	t.Helper()
	startBrowser(chromium(t))
	require.NoError(t, browserErr, "start chromium")
	tb := &tab{t: t}
	ctx, cancel := chromedp.NewContext(browserCtx, chromedp.WithNewBrowserContext(), chromedp.WithListener(func(ev any) {
		if _, ok := ev.(*cdppage.EventJavascriptDialogOpening); ok {
			tb.dialog.Store(true)
		}
	}))
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(ctx))
	tb.ctx = ctx
	return tb
}

const actionTimeout = 20 * time.Second

// do runs actions that do not navigate.
func (b *tab) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	require.NoError(b.t, chromedp.Do(ctx, actions...))
}

// load runs actions that load a page (a navigation, a link followed, a
// form submitted) and returns the final document's HTTP status.
func (b *tab) load(actions ...chromedp.Action[chromedp.Void]) int {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, actions...)
	require.NoError(b.t, err)
	require.NotNil(b.t, resp)
	return int(resp.Status)
}

func (b *tab) nav(u string) int {
	b.t.Helper()
	return b.load(chromedp.Navigate(u))
}

// js evaluates an expression in the page and returns its value.
func js[T any](b *tab, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(b.t, err, expr)
	return v
}

// text is the text of the first element matching a CSS selector, or ""
// when there is none (it does not wait).
func (b *tab) text(sel string) string {
	b.t.Helper()
	return js[string](b, fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, sel))
}

func (b *tab) location() string {
	b.t.Helper()
	return js[string](b, `location.pathname + location.search`)
}

// eventually re-evaluates cond (a JS expression) until it is true.
func (b *tab) eventually(cond string, within time.Duration, msg string) {
	b.t.Helper()
	require.Eventually(b.t, func() bool {
		// An evaluation during a navigation fails (its document goes
		// away): that is a "not yet".
		ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
		defer cancel()
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](cond))
		return err == nil && ok
	}, within, 100*time.Millisecond, msg)
}

// screenshot writes docs/console/NAME.png with -update.
func (b *tab) screenshot(name string) {
	b.t.Helper()
	if !*update {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(b.t, err)
	dir := filepath.Join("..", "..", "docs", "console")
	require.NoError(b.t, os.MkdirAll(dir, 0o755))
	require.NoError(b.t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
}

// unlabelled lists the form controls of the page that have no label: every
// visible control must have one.
func (b *tab) unlabelled() []string {
	b.t.Helper()
	return js[[]string](b, `Array.from(document.querySelectorAll("input:not([type=hidden]), select, textarea"))
		.filter(e => e.labels.length === 0 && !e.getAttribute("aria-label"))
		.map(e => e.outerHTML)`)
}

// stack is a herald serve process with a real SMTP server.
type stack struct {
	url   string
	token string
	smtp  *smtptest.Server
}

func startHerald(t *testing.T) *stack {
	t.Helper()
	db := pgtest.URL(t)
	binOnce.Do(func() { binPath, removeBin, binErr = proctest.Build(context.Background()) })
	require.NoError(t, binErr)
	smtp := smtptest.Start(t)
	addr, err := proctest.FreeAddr()
	require.NoError(t, err)
	s := &stack{url: "http://" + addr, token: "console-test-" + testenv.Suffix(), smtp: smtp}
	p, err := proctest.Start(proctest.Spec{Bin: binPath, Args: []string{"serve"}, Dir: t.TempDir(), Env: map[string]string{
		"HERALD_DATABASE_URL": db,
		"HERALD_SMTP_URL":     smtp.URL() + "?tls=none",
		"HERALD_SMTP_FROM":    "herald@example.com",
		"HERALD_API_TOKEN":    s.token,
		"HERALD_HTTP_ADDR":    addr,
		"HERALD_LOG_LEVEL":    "warn",
	}})
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := p.Stop(30 * time.Second); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("--- herald serve log ---\n%s", p.Log())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, proctest.WaitHTTP(ctx, s.url+"/readyz", 60*time.Second))
	return s
}

// call makes an API request with the token and decodes the JSON reply.
func (s *stack) call(t *testing.T, method, path string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.url+path, rd)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if out != nil && len(raw) > 0 {
		require.NoError(t, json.Unmarshal(raw, out), string(raw))
	}
	return resp.StatusCode
}

func (s *stack) create(t *testing.T, user, to, subject string) string {
	t.Helper()
	var n struct {
		ID string `json:"id"`
	}
	code := s.call(t, http.MethodPost, "/notifications", map[string]string{
		"user_id": user, "channel": "email", "to": to, "subject": subject, "body": "Hello " + user + ",\nyour order shipped.",
	}, &n)
	require.Equal(t, http.StatusCreated, code)
	return n.ID
}

func (s *stack) status(t *testing.T, id string) string {
	t.Helper()
	var n struct {
		Status string `json:"status"`
	}
	require.Equal(t, http.StatusOK, s.call(t, http.MethodGet, "/notifications/"+id, nil, &n))
	return n.Status
}

func (s *stack) waitStatus(t *testing.T, id, want string) {
	t.Helper()
	require.Eventually(t, func() bool {
		// No require here: the condition runs on another goroutine.
		resp, err := http.DefaultClient.Do(s.request(http.MethodGet, "/notifications/"+id))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var n struct {
			Status string `json:"status"`
		}
		return json.NewDecoder(resp.Body).Decode(&n) == nil && n.Status == want
	}, 20*time.Second, 50*time.Millisecond, "notification %s never became %s", id, want)
}

func (s *stack) request(method, path string) *http.Request {
	req, _ := http.NewRequest(method, s.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	return req
}

// sentCount is how many times the mail server accepted the notification.
func (s *stack) sentCount(id string) int {
	return s.smtp.CountByMessageID()["<"+id+"@example.com>"]
}

func (b *tab) login(s *stack) {
	b.t.Helper()
	require.Equal(b.t, http.StatusOK, b.nav(s.url+"/ui/"))
	require.True(b.t, strings.HasPrefix(b.location(), "/ui/login"), b.location())
	b.do(chromedp.SetValue(chromedp.CSS("#token"), s.token))
	require.Equal(b.t, http.StatusOK, b.load(chromedp.Click(chromedp.CSS("form.login button"))))
	require.Equal(b.t, "/ui/", b.location())
}

// TestConsoleInBrowser walks through the console as an operator: log in,
// find notifications, page, read a failed one's attempts, redrive it and
// watch it sent; and the refusals: a wrong token, a form without its CSRF
// token, bad filters and cursors, an expired session, a subject that is
// markup.
func TestConsoleInBrowser(t *testing.T) {
	t0 := time.Now()
	// The browser starts while herald builds and starts.
	go startBrowser(chromium(t))
	s := startHerald(t)
	t.Logf("herald up after %s", time.Since(t0))
	b := newTab(t)
	t.Logf("browser up after %s", time.Since(t0))
	b.do(chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		// Times show in the browser's zone: pin one, to read it back.
		_, err := chromedp.Call(ctx, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: "Asia/Tokyo"})
		return err
	}))

	// Two notifications that the mail server refuses for good (550): dead
	// letters at their first attempt.
	s.smtp.Fail(550, "5.1.1 mailbox unavailable")
	bounced := s.create(t, "u-bounce", "gone@example.com", "Your invoice")
	raced := s.create(t, "u-bounce", "gone2@example.com", "Your receipt")
	s.waitStatus(t, bounced, "failed")
	s.waitStatus(t, raced, "failed")
	s.smtp.Fail(0, "")
	var listed []string
	for i := range 3 {
		listed = append(listed, s.create(t, "u-list", fmt.Sprintf("list%d@example.com", i), fmt.Sprintf("Weekly digest %d", i)))
	}
	xss := s.create(t, "u-xss", "x@example.com", "<script>alert(1)</script>")
	for _, id := range append(listed, xss) {
		s.waitStatus(t, id, "sent")
	}

	t.Logf("data ready after %s", time.Since(t0))
	t.Run("wrong token", func(t *testing.T) {
		b.t = t
		require.Equal(t, http.StatusOK, b.nav(s.url+"/ui/notifications"))
		require.Equal(t, "/ui/login", b.location(), "a page behind the token sends to the login form")
		b.do(chromedp.SetValue(chromedp.CSS("#token"), "not-the-token"))
		require.Equal(t, http.StatusUnauthorized, b.load(chromedp.Click(chromedp.CSS("form.login button"))))
		require.Contains(t, b.text(".error"), "not the API token")
		require.Equal(t, http.StatusOK, b.nav(s.url+"/ui/"))
		require.Equal(t, "/ui/login", b.location(), "a refused login opens no session")
		require.NotContains(t, b.location(), "not-the-token")
	})

	t.Run("login", func(t *testing.T) {
		b.t = t
		b.login(s)
		cookies := js[string](b, `document.cookie`)
		require.NotContains(t, cookies, "herald_session", "the session cookie is HttpOnly")
		require.NotContains(t, b.location(), s.token)
		require.Empty(t, b.unlabelled())
	})

	t.Run("overview", func(t *testing.T) {
		b.t = t
		require.Equal(t, http.StatusOK, b.nav(s.url+"/ui/"))
		require.Equal(t, "2", strings.TrimSpace(b.text("#deadletters")))
		require.Equal(t, "4", strings.TrimSpace(b.text("#sent-hour")))
		require.Equal(t, "2", strings.TrimSpace(b.text("#failed-hour")))
		// The process reports itself, its worker's sender with it.
		require.Contains(t, b.text("table.processes"), "api, relay, worker")
		require.Contains(t, b.text("table.processes .sender"), "email: up", "herald serve runs the worker: its sender's state is known")
		require.Equal(t, "0", strings.TrimSpace(b.text("#pending")))
		require.Equal(t, "0", strings.TrimSpace(b.text("#reconciled")))
		// Times in the browser's zone, UTC on hover.
		b.eventually(`document.documentElement.dataset.js === "ready"`, 5*time.Second, "the script ran")
		require.Contains(t, b.text("figcaption time"), "GMT+9")
		require.Contains(t, js[string](b, `document.querySelector("figcaption time").title`), "UTC")
		b.screenshot("overview")

		// The overview refreshes itself, without reloading the page.
		js[bool](b, `window.__sameDocument = true`)
		id := s.create(t, "u-refresh", "refresh@example.com", "Refreshed")
		s.waitStatus(t, id, "sent")
		b.eventually(`document.querySelector("#sent-hour").textContent.trim() === "5"`, 15*time.Second, "the overview refreshed")
		require.True(t, js[bool](b, `window.__sameDocument === true`), "the page was not reloaded")
	})

	t.Run("list by user and page with the cursor", func(t *testing.T) {
		b.t = t
		require.Equal(t, http.StatusOK, b.nav(s.url+"/ui/notifications"))
		require.Empty(t, b.unlabelled())
		b.do(chromedp.SetValue(chromedp.CSS("#user_id"), "u-list"), chromedp.SetValue(chromedp.CSS("#limit"), "2"))
		require.Equal(t, http.StatusOK, b.load(chromedp.Click(chromedp.CSS("form.filters button"))))
		first := js[[]string](b, `Array.from(document.querySelectorAll("#notifications tbody td[data-label=ID]")).map(e => e.textContent.trim())`)
		require.Equal(t, []string{listed[2], listed[1]}, first, "newest first")
		b.screenshot("notifications")
		require.Equal(t, http.StatusOK, b.load(chromedp.Click(chromedp.CSS("#next"))))
		second := js[[]string](b, `Array.from(document.querySelectorAll("#notifications tbody td[data-label=ID]")).map(e => e.textContent.trim())`)
		require.Equal(t, []string{listed[0]}, second)
		require.Equal(t, "", b.text("#next"), "the last page has no next link")
		require.Contains(t, b.location(), "user_id=u-list", "the cursor keeps the filters")

		// At 360 px wide nothing overflows sideways.
		b.do(chromedp.EmulateViewport(360, 740))
		require.Equal(t, http.StatusOK, b.nav(s.url+"/ui/notifications?user_id=u-list"))
		require.LessOrEqual(t, js[int](b, `document.documentElement.scrollWidth`), 360)
		b.screenshot("notifications-360")
		for _, path := range []string{"/ui/", "/ui/notifications/" + bounced, "/ui/dead-letters"} {
			require.Equal(t, http.StatusOK, b.nav(s.url+path))
			require.LessOrEqual(t, js[int](b, `document.documentElement.scrollWidth`), 360, path)
		}
		b.do(chromedp.EmulateViewport(1280, 900))
	})

	t.Run("keyboard reaches every control", func(t *testing.T) {
		b.t = t
		require.Equal(t, http.StatusOK, b.nav(s.url+"/ui/dead-letters"))
		want := js[[]string](b, `Array.from(document.querySelectorAll("a[href], input:not([type=hidden]), select, button")).map(e => e.id || e.getAttribute("href") || e.textContent.trim())`)
		var reached []string
		for range len(want) {
			b.do(chromedp.KeyEvent("\t"))
			reached = append(reached, js[string](b, `(e => e.id || e.getAttribute("href") || e.textContent.trim())(document.activeElement)`))
		}
		require.Equal(t, want, reached, "Tab visits every link and control, in document order")
	})

	t.Run("bad filters and cursors show the API's error next to the field", func(t *testing.T) {
		b.t = t
		require.Equal(t, http.StatusBadRequest, b.nav(s.url+"/ui/notifications?colour=red"))
		require.Contains(t, b.text("#form-error"), `unknown query parameter "colour"`)
		require.Equal(t, http.StatusBadRequest, b.nav(s.url+"/ui/notifications?user_id=u-list&cursor=bogus"))
		require.Contains(t, b.text("form.filters"), "the cursor is not one this API issued")
		require.Equal(t, http.StatusBadRequest, b.nav(s.url+"/ui/notifications?created_after=yesterday"))
		require.Contains(t, b.text("#created_after + .field-error"), "created_after must be an RFC 3339 time")
		require.Contains(t, b.text("#created_after + .field-error"), `the link gave "yesterday"`, "a date input cannot hold it: the error quotes it")
		require.Equal(t, http.StatusBadRequest, b.nav(s.url+"/ui/notifications?status=lost"))
		require.Contains(t, b.text("#status + .field-error"), "status must be pending, scheduled, sent, failed, canceled, expired or suppressed")
		require.Equal(t, http.StatusBadRequest, b.nav(s.url+"/ui/dead-letters?since=forever"))
		require.Contains(t, b.text("#since + .field-error"), "since must be a positive duration")
		require.Equal(t, http.StatusBadRequest, b.nav(s.url+"/ui/dead-letters?colour=red"))
		require.Contains(t, b.text("#form-error"), `unknown filter "colour"`)
		require.Equal(t, http.StatusNotFound, b.nav(s.url+"/ui/notifications/999999"))
	})

	t.Run("a subject that is markup renders as text", func(t *testing.T) {
		b.t = t
		require.Equal(t, http.StatusOK, b.nav(s.url+"/ui/notifications?user_id=u-xss"))
		require.Equal(t, "<script>alert(1)</script>", strings.TrimSpace(b.text("#notifications td.subject")))
		require.Equal(t, http.StatusOK, b.nav(s.url+"/ui/notifications/"+xss))
		require.Equal(t, "<script>alert(1)</script>", b.text("#subject"))
		require.Contains(t, js[string](b, `document.querySelector("#subject").innerHTML`), "&lt;script&gt;")
		require.Equal(t, 1, js[int](b, `document.scripts.length`), "only the console's own script")
		require.False(t, b.dialog.Load(), "no script of the subject ran")
	})

	t.Run("a failed notification's attempts", func(t *testing.T) {
		b.t = t
		require.Equal(t, http.StatusOK, b.nav(s.url+"/ui/dead-letters"))
		require.Empty(t, b.unlabelled())
		b.screenshot("dead-letters")
		require.Equal(t, http.StatusOK, b.load(chromedp.Click(chromedp.CSS(`#deadletters a[href="/ui/notifications/`+bounced+`"]`))))
		require.Equal(t, "/ui/notifications/"+bounced, b.location())
		require.Equal(t, "failed", strings.TrimSpace(b.text("#status")))
		require.Equal(t, "dead", strings.TrimSpace(b.text("#attempts td.outcome")))
		require.Contains(t, b.text("#attempts td.attempt-error"), "550")
		require.Contains(t, b.text("#attempts"), "<"+bounced+"@example.com>", "the attempt's Message-ID")
		require.Contains(t, b.text("#history"), "dead-lettered")
		require.Contains(t, b.text("#body"), "your order shipped")
		b.screenshot("detail")
	})

	t.Run("a form without its CSRF token is refused", func(t *testing.T) {
		b.t = t
		require.Equal(t, http.StatusOK, b.nav(s.url+"/ui/dead-letters"))
		b.do(chromedp.Click(chromedp.CSS("#dl-" + bounced)))
		js[bool](b, `document.querySelector("#redrive-form input[name=csrf]").remove() || true`)
		require.Equal(t, http.StatusForbidden, b.load(chromedp.Click(chromedp.CSS("#redrive"))))
		require.Contains(t, b.text(".error"), "security token is missing or stale")
		// A token of another browser (another session's cookie) is refused too.
		require.Equal(t, http.StatusOK, b.nav(s.url+"/ui/dead-letters"))
		b.do(chromedp.Click(chromedp.CSS("#dl-" + bounced)))
		js[bool](b, `(document.querySelector("#redrive-form input[name=csrf]").value = "0".repeat(64)) && true`)
		require.Equal(t, http.StatusForbidden, b.load(chromedp.Click(chromedp.CSS("#redrive"))))
		require.Equal(t, "failed", s.status(t, bounced), "a refused form changed nothing")
	})

	t.Run("redrive from the dead-letter page and watch it sent", func(t *testing.T) {
		b.t = t
		require.Equal(t, http.StatusOK, b.nav(s.url+"/ui/dead-letters"))
		b.do(chromedp.Click(chromedp.CSS("#dl-" + bounced)))
		require.Equal(t, http.StatusOK, b.load(chromedp.Click(chromedp.CSS("#redrive"))))
		require.Contains(t, b.text("#confirm-count"), "1 notification will be sent again")
		require.Equal(t, "failed", s.status(t, bounced), "the confirmation changes nothing")
		require.Equal(t, http.StatusOK, b.load(chromedp.Click(chromedp.CSS("#confirm"))))
		require.Contains(t, b.text("#result"), bounced)
		require.Contains(t, b.text("#result .result"), "redriven")
		require.Contains(t, b.text("#result-summary"), "1 redriven, 0 skipped")
		require.Equal(t, http.StatusOK, b.load(chromedp.Click(chromedp.CSS(`#result a[href="/ui/notifications/`+bounced+`"]`))))
		require.Equal(t, "/ui/notifications/"+bounced, b.location())
		s.waitStatus(t, bounced, "sent")
		require.Equal(t, http.StatusOK, b.load(chromedp.Reload()))
		require.Equal(t, "sent", strings.TrimSpace(b.text("#status")), "the redriven notification is sent")
		require.Equal(t, 1, s.sentCount(bounced), "sent once")
		require.Equal(t, "sent", strings.TrimSpace(b.text("#attempts tbody tr:first-child td.outcome")), "newest first")
		require.Contains(t, b.text("#history"), "redriven")
	})

	t.Run("a redrive of ids no longer failed reports them skipped", func(t *testing.T) {
		b.t = t
		require.Equal(t, http.StatusOK, b.nav(s.url+"/ui/dead-letters"))
		b.do(chromedp.Click(chromedp.CSS("#dl-" + raced)))
		require.Equal(t, http.StatusOK, b.load(chromedp.Click(chromedp.CSS("#redrive"))))
		require.Contains(t, b.text("#confirm-count"), "1 notification will be sent again")
		// Meanwhile, someone else redrives it over the API.
		var res struct {
			Redriven []string `json:"redriven"`
		}
		require.Equal(t, http.StatusOK, s.call(t, http.MethodPost, "/dead-letters/redrive", map[string]any{"ids": []string{raced}}, &res))
		require.Equal(t, []string{raced}, res.Redriven)
		s.waitStatus(t, raced, "sent")
		require.Equal(t, http.StatusOK, b.load(chromedp.Click(chromedp.CSS("#confirm"))))
		require.Contains(t, b.text("#result-summary"), "0 redriven, 1 skipped")
		require.Contains(t, b.text("#result"), raced)
		require.Contains(t, b.text("#result .result"), "no longer failed")
		require.Equal(t, 1, s.sentCount(raced), "sent once, never twice")
	})

	t.Run("an expired session goes back to the login with a message", func(t *testing.T) {
		b.t = t
		require.Equal(t, http.StatusOK, b.nav(s.url+"/ui/"))
		old := &Console{cfg: Config{Token: s.token, SessionTTL: time.Hour}, key: sessionKey(s.token)}
		expired := old.newSession(time.Now().Add(-2 * time.Hour))
		b.do(chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := chromedp.Call(ctx, network.SetCookie, network.SetCookieParams{
				Name: sessionCookie, Value: expired, URL: s.url + "/ui/", Path: "/ui", HTTPOnly: ptr(true), SameSite: network.CookieSameSiteStrict,
			})
			return err
		}))
		// The overview's refresh finds the session expired and moves the
		// page to the login form.
		b.eventually(`location.pathname + location.search === "/ui/login?reason=expired" && document.readyState === "complete"`, 15*time.Second, "the refresh went to the login form")
		require.Contains(t, b.text(".notice"), "Your session expired")
		// So does following a link.
		require.Equal(t, http.StatusOK, b.nav(s.url+"/ui/notifications"))
		require.Equal(t, "/ui/login?reason=expired", b.location())
		require.Contains(t, b.text(".notice"), "Your session expired")
		b.login(s)
	})

	t.Run("no page without a session", func(t *testing.T) {
		for _, path := range []string{"/ui/", "/ui/overview", "/ui/notifications", "/ui/notifications/" + bounced, "/ui/dead-letters"} {
			resp, err := noRedirect.Get(s.url + path)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusSeeOther, resp.StatusCode, path)
			require.Equal(t, "/ui/login", resp.Header.Get("Location"), path)
		}
		resp, err := http.PostForm(s.url+"/ui/dead-letters/redrive", url.Values{"all": {"1"}, "step": {"redrive"}})
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, "/ui/login", resp.Request.URL.Path)
	})
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func ptr[T any](v T) *T { return &v }

// TestRecipientsInBrowser: an operator looks a user up on the Recipients
// page of a real herald serve, sees their record and preferences, and
// changes one preference with the page's form; the API then shows the
// change, the user's other preference kept.
func TestRecipientsInBrowser(t *testing.T) {
	go startBrowser(chromium(t))
	s := startHerald(t)
	require.Equal(t, http.StatusOK, s.call(t, http.MethodPut, "/recipients/u-ada", map[string]string{"email": "ada@example.com", "locale": "de-AT"}, nil))
	require.Equal(t, http.StatusOK, s.call(t, http.MethodPut, "/recipients/u-ada/preferences",
		map[string]any{"categories": map[string]any{"digest": map[string]bool{"email": false}}}, nil))
	b := newTab(t)
	b.login(s)

	require.Equal(t, http.StatusOK, b.nav(s.url+"/ui/recipients"))
	require.Empty(t, b.unlabelled())
	b.do(chromedp.SetValue(chromedp.CSS("#user_id"), "u-ada"))
	require.Equal(t, http.StatusOK, b.load(chromedp.Click(chromedp.CSS("#lookup-form button"))))
	require.Equal(t, "/ui/recipients?user_id=u-ada", b.location())
	require.Equal(t, "ada@example.com", b.text("#recipient-email"))
	require.Equal(t, "de-AT", b.text("#recipient-locale"))
	require.Contains(t, b.text("#preferences"), "no (opted out)")
	require.Empty(t, b.unlabelled())

	b.do(chromedp.SetValue(chromedp.CSS("#category"), "news"), chromedp.SetValue(chromedp.CSS("#allowed"), "false"))
	require.Equal(t, http.StatusOK, b.load(chromedp.Click(chromedp.CSS("#set-preference"))))
	require.Contains(t, b.text("#changed"), "opted out of news by email")
	var prefs struct {
		Categories map[string]map[string]bool `json:"categories"`
	}
	require.Equal(t, http.StatusOK, s.call(t, http.MethodGet, "/recipients/u-ada/preferences", nil, &prefs))
	require.Equal(t, map[string]map[string]bool{"digest": {"email": false}, "news": {"email": false}}, prefs.Categories)

	// The digest row's button opts the user back in.
	require.Equal(t, http.StatusOK, b.load(chromedp.Click(chromedp.CSS(`button[aria-label="Allow digest by email"]`))))
	require.Equal(t, http.StatusOK, s.call(t, http.MethodGet, "/recipients/u-ada/preferences", nil, &prefs))
	require.Equal(t, map[string]map[string]bool{"digest": {"email": true}, "news": {"email": false}}, prefs.Categories)
	b.screenshot("recipients")
	require.False(t, b.dialog.Load())
}
