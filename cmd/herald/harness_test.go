package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// The end-to-end tests run the real binary, as a user would, against the
// real services.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// heraldBin builds the herald binary once per test run.
func heraldBin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "herald-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "herald")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binPath
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is one running herald process.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{}
	err  error
}

// startHerald runs `herald args...` in dir with env (on top of a clean
// environment) and stops it when the test ends.
func startHerald(t *testing.T, dir string, env map[string]string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(heraldBin(t), args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &proc{t: t, name: strings.Join(args, " "), cmd: cmd, log: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout = p.log
	cmd.Stderr = p.log
	require.NoError(t, cmd.Start())
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("--- log of herald %s ---\n%s", p.name, p.log.String())
		}
	})
	return p
}

// Stop sends SIGTERM and waits for a clean exit.
func (p *proc) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Errorf("herald %s did not stop within 30s of SIGTERM", p.name)
	}
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// waitExit waits for the process to end on its own.
func (p *proc) waitExit(d time.Duration) {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		p.t.Fatalf("herald %s still running after %s", p.name, d)
	}
}

// freeAddr returns a loopback address with a free port.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// waitHTTP polls url until it answers 200.
func waitHTTP(t *testing.T, url string) {
	t.Helper()
	require.Eventually(t, func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 60*time.Second, 20*time.Millisecond, "%s never answered 200", url)
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
