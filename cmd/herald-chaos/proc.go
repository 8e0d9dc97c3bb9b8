package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// buildHerald builds the herald binary of this module into a temporary
// directory; the returned func removes it.
func buildHerald(ctx context.Context) (string, func(), error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", nil, fmt.Errorf("find the module root (go env GOMOD): %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", nil, fmt.Errorf("run herald-chaos inside the herald module: go env GOMOD is empty")
	}
	dir, err := os.MkdirTemp("", "herald-chaos-bin-")
	if err != nil {
		return "", nil, fmt.Errorf("temp dir for the herald binary: %w", err)
	}
	bin := filepath.Join(dir, "herald")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/herald")
	cmd.Dir = filepath.Dir(gomod)
	if b, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("go build ./cmd/herald: %w\n%s", err, b)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// proc is one running herald process.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	done    chan struct{}
	err     error
	// expected is set before the harness kills or stops the process, so
	// that its exit is not reported as a surprise.
	expected bool
}

// startProc runs bin with args and env (on top of PATH and HOME only), its
// output in a log file of its own under dir.
func startProc(bin, dir, name string, env map[string]string, args ...string) (*proc, error) {
	logPath := filepath.Join(dir, fmt.Sprintf("%s-%s.log", name, time.Now().Format("150405.000")))
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("log file of %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start herald %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, logFile: f, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// running reports whether the process is still alive.
func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	p.expected = true
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stop sends SIGTERM and waits up to d for a clean exit, then kills. It
// reports whether the exit was clean.
func (p *proc) stop(d time.Duration) bool {
	p.expected = true
	if !p.running() {
		return true
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return p.err == nil
	case <-t.C:
		p.kill()
		return false
	}
}

// waitExit waits up to d for the process to end on its own.
func (p *proc) waitExit(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// logContains reports whether the process's log holds s.
func (p *proc) logContains(s string) bool {
	b, err := os.ReadFile(p.logPath)
	return err == nil && bytes.Contains(b, []byte(s))
}

// logTail returns the last n bytes of the process's log.
func (p *proc) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// freeAddr returns a loopback address with a free port.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitHTTP polls url until it answers 200, within d.
func waitHTTP(ctx context.Context, url string, d time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(d)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer 200 within %s (last: %v)", url, d, errOrStatus(err, resp))
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

func errOrStatus(err error, resp *http.Response) string {
	if err != nil {
		return err.Error()
	}
	return resp.Status
}

// sleep waits d or until ctx ends. The harness paces faults with it; it is
// never used to wait for a condition.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// suffix returns a short random name part.
func suffix() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// rabbitmqctl runs one rabbitmqctl command, bounded in time.
func rabbitmqctl(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", append([]string{"-q"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("rabbitmqctl %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
