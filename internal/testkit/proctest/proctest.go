// Package proctest runs the real herald binary the way an operator does, for
// the end-to-end tests and the chaos harness: it builds the binary, starts
// processes with an environment of their own, keeps their output, and stops
// or kills them. It also holds the small waits both need (a free port, an
// HTTP endpoint that answers, a rabbitmqctl command).
//
// Nothing here takes a *testing.T: the chaos harness is a program, so every
// failure is returned as an error and the tests wrap what they use.
package proctest

import (
	"github.com/heraldhq/herald/internal/testkit/testlog"

	"bytes"
	"context"
	"errors"
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
	"time"
)

// Build compiles the module's ./cmd/herald into a new temporary directory and
// returns the binary's path and a func that removes the directory. It finds
// the module root through `go env GOMOD`, so it works from any directory
// inside the module: a test's package directory or the repository root.
func Build(ctx context.Context) (bin string, remove func(), err error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", nil, fmt.Errorf("find the module root (go env GOMOD): %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", nil, errors.New("build herald inside the herald module: go env GOMOD is empty")
	}
	dir, err := os.MkdirTemp("", "herald-bin-")
	if err != nil {
		return "", nil, fmt.Errorf("temp dir for the herald binary: %w", err)
	}
	bin = filepath.Join(dir, "herald")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/herald")
	cmd.Dir = filepath.Dir(gomod)
	if b, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("go build ./cmd/herald: %w\n%s", err, b)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// Spec describes one process to start.
type Spec struct {
	// Bin is the binary to run, usually the one Build returned.
	Bin string
	// Args are the command-line arguments, e.g. "worker".
	Args []string
	// Env is the whole environment besides PATH and HOME: the process does
	// not inherit the caller's, so a stray HERALD_ variable cannot leak in.
	Env map[string]string
	// Dir is the working directory; empty means the caller's.
	Dir string
	// Name names the process in errors; empty means Args joined by spaces.
	Name string
	// LogFile, when set, receives a copy of the output, which outlives the
	// process for inspection after a run.
	LogFile string
}

// Proc is one running (or exited) process.
type Proc struct {
	name string
	cmd  *exec.Cmd
	log  testlog.Buffer
	done chan struct{}
	err  error // the exit status, set before done is closed
}

// Start starts the process described by s. Its output, stdout and stderr
// together, is kept in memory (Log) and in s.LogFile when set.
func Start(s Spec) (*Proc, error) {
	p := &Proc{name: s.Name, done: make(chan struct{})}
	if p.name == "" {
		p.name = strings.Join(s.Args, " ")
	}
	out := io.Writer(&p.log)
	var file *os.File
	if s.LogFile != "" {
		f, err := os.Create(s.LogFile)
		if err != nil {
			return nil, fmt.Errorf("log file of herald %s: %w", p.name, err)
		}
		file = f
		out = io.MultiWriter(&p.log, f)
	}
	cmd := exec.Command(s.Bin, s.Args...)
	cmd.Dir = s.Dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range s.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		if file != nil {
			file.Close()
		}
		return nil, fmt.Errorf("start herald %s: %w", p.name, err)
	}
	p.cmd = cmd
	go func() {
		p.err = cmd.Wait()
		if file != nil {
			file.Close()
		}
		close(p.done)
	}()
	return p, nil
}

// Name returns the name the process was started under.
func (p *Proc) Name() string { return p.name }

// Running reports whether the process is still alive.
func (p *Proc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Err returns the process's exit status: nil for a clean exit or while it
// still runs, an *exec.ExitError otherwise.
func (p *Proc) Err() error {
	if p.Running() {
		return nil
	}
	return p.err
}

// Stop sends SIGTERM and waits up to d for the process to exit; past d it
// kills it and returns an error. An exit within d, whatever its status (see
// Err), returns nil, as does a process that had already exited.
func (p *Proc) Stop(d time.Duration) error {
	if !p.Running() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if p.WaitExit(context.Background(), d) == nil {
		return nil
	}
	p.Kill()
	return fmt.Errorf("herald %s did not stop within %s of SIGTERM; killed", p.name, d)
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// WaitExit waits up to d for the process to end on its own. It returns an
// error when the process still runs after d or ctx ends first; the exit
// status itself is Err's.
func (p *Proc) WaitExit(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		return fmt.Errorf("herald %s still running after %s", p.name, d)
	case <-ctx.Done():
		return fmt.Errorf("herald %s: %w", p.name, ctx.Err())
	}
}

// Log returns everything the process has written so far.
func (p *Proc) Log() string { return p.log.String() }

// LogContains reports whether the process's output holds s.
func (p *Proc) LogContains(s string) bool { return strings.Contains(p.log.String(), s) }

// WaitLog waits up to d for the process's output to satisfy ok. The output
// reaches Log through a pipe the caller's side copies on its own schedule, so
// a line the process wrote before an event the caller saw (its /healthz
// answering, a row in the database) may not be in Log yet: every check of a
// running process's output polls. After the process has exited (WaitExit),
// Log is complete and a single read is enough.
func (p *Proc) WaitLog(ctx context.Context, d time.Duration, ok func(log string) bool) error {
	deadline := time.Now().Add(d)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("herald %s: %w", p.name, ctx.Err())
		}
		if ok(p.log.String()) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("herald %s: its output did not show what was awaited within %s", p.name, d)
		}
		t.Reset(pollEvery)
	}
}

// LogTail returns the last n bytes of the process's output.
func (p *Proc) LogTail(n int) string {
	s := p.log.String()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}

// handedOut holds the ports FreeAddr has returned in this process: the
// kernel may offer a port again once its listener is closed, and two
// processes of one test binary told the same port would meet each other's
// API (a test that waits for /healthz would find the other one's).
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago, for a process to listen on, and that no earlier call in this process
// returned.
func FreeAddr() (string, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("find a free port: %w", err)
		}
		addr := ln.Addr().(*net.TCPAddr)
		ln.Close()
		if !handedOut.ports[addr.Port] {
			handedOut.ports[addr.Port] = true
			return addr.String(), nil
		}
	}
	return "", errors.New("find a free port: the kernel kept offering ports already handed out")
}

// pollEvery paces WaitHTTP: short enough that a test does not wait long
// after the process is up, long enough not to busy-loop.
const pollEvery = 20 * time.Millisecond

// WaitHTTP polls url until it answers 200, for up to d. A process that
// listens answers at once, so each request is bounded well below d.
func WaitHTTP(ctx context.Context, url string, d time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(d)
	t := time.NewTimer(pollEvery)
	defer t.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		last := ""
		if err != nil {
			last = err.Error()
		} else {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer 200 within %s (last: %s)", url, d, last)
		}
		t.Reset(pollEvery)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Rabbitmqctl runs `rabbitmqctl -q args...`; rabbitmqctl must be on PATH.
// ctx bounds it: give it a deadline, since a broker that does not answer
// makes rabbitmqctl wait for a long time.
func Rabbitmqctl(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "rabbitmqctl", append([]string{"-q"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("rabbitmqctl %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
