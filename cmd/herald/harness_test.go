package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/proctest"
	"github.com/heraldhq/herald/internal/testkit/smtptest"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// The end-to-end tests run the real binary, as a user would, against the
// real services.

var (
	buildOnce sync.Once
	binPath   string
	removeBin func()
	buildErr  error
)

// TestMain removes the herald binary the tests built, if any, and the
// RabbitMQ vhosts testenv.Vhost made that remain.
func TestMain(m *testing.M) {
	code := m.Run()
	if removeBin != nil {
		removeBin()
	}
	if err := testenv.DeleteVhosts(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// heraldBin builds the herald binary once per test run.
func heraldBin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binPath, removeBin, buildErr = proctest.Build(context.Background())
	})
	require.NoError(t, buildErr)
	return binPath
}

// proc is one running herald process, with the test that started it.
type proc struct {
	*proctest.Proc
	t *testing.T
}

// startHerald runs `herald args...` in dir with env (on top of a clean
// environment) and stops it when the test ends.
func startHerald(t *testing.T, dir string, env map[string]string, args ...string) *proc {
	t.Helper()
	pp, err := proctest.Start(proctest.Spec{Bin: heraldBin(t), Args: args, Env: env, Dir: dir})
	require.NoError(t, err)
	p := &proc{Proc: pp, t: t}
	t.Cleanup(func() {
		// Only a process that ignores SIGTERM fails the test here: one that
		// had exited, or exits non-zero when stopped, is the test's to check.
		if err := p.Stop(30 * time.Second); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("--- log of herald %s ---\n%s", p.Name(), p.Log())
		}
	})
	return p
}

// requireLog fails the test unless the process's output comes to hold every
// one of wants within 10 s: output still in the pipe when the test looks is
// not missing, so a running process's log is polled, never read once.
func (p *proc) requireLog(wants ...string) {
	p.t.Helper()
	err := p.WaitLog(context.Background(), 10*time.Second, func(log string) bool {
		for _, w := range wants {
			if !strings.Contains(log, w) {
				return false
			}
		}
		return true
	})
	if err != nil {
		var missing []string
		for _, w := range wants {
			if !p.LogContains(w) {
				missing = append(missing, w)
			}
		}
		require.Failf(p.t, "the process's output lacks what the test awaited", "%v\nmissing %q\n--- output ---\n%s", err, missing, p.Log())
	}
}

// requireLogError is requireLog for an ERROR record that names s.
func (p *proc) requireLogError(s string) {
	p.t.Helper()
	err := p.WaitLog(context.Background(), 10*time.Second, func(log string) bool { return logHasError(log, s) })
	require.NoError(p.t, err, "an ERROR log names %q:\n%s", s, p.LogTail(4000))
}

// waitExit waits for the process to end on its own.
func (p *proc) waitExit(d time.Duration) {
	p.t.Helper()
	require.NoError(p.t, p.WaitExit(context.Background(), d))
}

// freeAddr returns a loopback address with a free port.
// serveEmbedded starts herald serve on SQLite in a directory of its own,
// mailing a real SMTP server, with env over those defaults (a
// HERALD_HTTP_ADDR in it is kept), and returns the API's base URL, the
// SMTP server and the directory.
func serveEmbedded(t *testing.T, env map[string]string) (base string, smtp *smtptest.Server, dir string) {
	t.Helper()
	smtp = smtptest.Start(t)
	dir = t.TempDir()
	all := map[string]string{
		"HERALD_DATABASE_URL":   "sqlite:herald.db",
		"HERALD_HTTP_ADDR":      freeAddr(t),
		"HERALD_SMTP_URL":       smtp.URL(),
		"HERALD_SMTP_FROM":      "herald@example.com",
		"HERALD_RELAY_INTERVAL": "100ms",
	}
	maps.Copy(all, env)
	startHerald(t, dir, all, "serve")
	base = "http://" + all["HERALD_HTTP_ADDR"]
	waitHTTP(t, base+"/healthz")
	return base, smtp, dir
}

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := proctest.FreeAddr()
	require.NoError(t, err)
	return addr
}

// waitHTTP polls url until it answers 200.
func waitHTTP(t *testing.T, url string) {
	t.Helper()
	require.NoError(t, proctest.WaitHTTP(context.Background(), url, 60*time.Second))
}

// client talks to a herald API.
type client struct {
	base  string
	token string
}

// testBody holds what SMTP bodies get wrong: a line with a single dot, a
// line starting "From ", and a line far over the 998-character limit.
var testBody = "Line one\n.\nFrom here on\n" + strings.Repeat("long ", 400) + "\nLast line"

type created struct {
	Status int
	ID     string
	Body   string
}

func (c client) create(t *testing.T, to string, headers map[string]string) created {
	t.Helper()
	body := fmt.Sprintf(`{"user_id":"u1","channel":"email","to":%q,"subject":"Hello","body":%q}`, to, testBody)
	req, err := http.NewRequest(http.MethodPost, c.base+"/notifications", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var n struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(b, &n)
	return created{Status: resp.StatusCode, ID: n.ID, Body: string(b)}
}

type notification struct {
	ID        string  `json:"id"`
	Status    string  `json:"status"`
	Attempts  int     `json:"attempts"`
	LastError *string `json:"last_error"`
}

func (c client) get(t *testing.T, id string) notification {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.base+"/notifications/"+id, nil)
	require.NoError(t, err)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var n notification
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&n))
	return n
}

// count runs a SELECT count(*) ... against PostgreSQL.
func count(t *testing.T, dbURL, query string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, query, args...).Scan(&n))
	return n
}

// scrape returns the value of one sample from a /metrics page, or -1.
func scrape(t *testing.T, url, sample string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			var f float64
			if _, err := fmt.Sscanf(v, "%g", &f); err == nil {
				return f
			}
		}
	}
	return -1
}

// httpClient bounds every request of the tests.
var httpClient = &http.Client{Timeout: 10 * time.Second}

func jsonDecode(r io.Reader, v any) error { return json.NewDecoder(r).Decode(v) }
