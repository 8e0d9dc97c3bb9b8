package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"time"

	"github.com/heraldhq/herald/internal/testkit/proctest"
	"github.com/heraldhq/herald/internal/transport/consume"
)

// proc is one herald process of the run.
type proc struct {
	*proctest.Proc
	// expected is set before the harness kills or stops the process, so
	// that its exit is not reported as a surprise.
	expected bool
}

// startProc runs `herald args` with env in the work dir, its output in a log
// file of its own there, which --keep leaves for a post-mortem.
func (h *harness) startProc(name string, env map[string]string, args ...string) (*proc, error) {
	p, err := proctest.Start(proctest.Spec{
		Bin:     h.bin,
		Args:    args,
		Env:     env,
		Dir:     h.dir,
		Name:    name,
		LogFile: filepath.Join(h.dir, fmt.Sprintf("%s-%s.log", name, time.Now().Format("150405.000"))),
	})
	if err != nil {
		return nil, err
	}
	return &proc{Proc: p}, nil
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	p.expected = true
	p.Kill()
}

// stop sends SIGTERM and waits up to d for a clean exit, then kills. It
// reports whether the exit was clean; a process already gone counts as one.
func (p *proc) stop(d time.Duration) bool {
	p.expected = true
	if !p.Running() {
		return true
	}
	return p.Stop(d) == nil && p.Err() == nil
}

// service is a server the harness runs for itself beside herald's
// processes (nats-server, FerretDB), which a fault kills and starts again;
// its process is nil until it is started.
type service struct {
	p *proctest.Proc
}

// kill kills the server (SIGKILL), as a crash would.
func (s *service) kill() {
	if s.p != nil {
		s.p.Kill()
	}
}

// stop stops the server: SIGTERM, and SIGKILL if it is still running after
// 15 s.
func (s *service) stop() {
	if s.p != nil {
		_ = s.p.Stop(15 * time.Second)
	}
}

// waitStarted polls ready every poll until it holds, for a process just
// started; it gives up, with the tail of the process's log, when the process
// exits first or within passes.
func waitStarted(ctx context.Context, p *proctest.Proc, within, poll time.Duration, ready func() bool) error {
	deadline := time.Now().Add(within)
	for !ready() {
		if !p.Running() {
			return fmt.Errorf("%s exited at start: %v\n%s", p.Name(), p.Err(), p.LogTail(2000))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %s:\n%s", p.Name(), within, p.LogTail(2000))
		}
		if err := sleep(ctx, poll); err != nil {
			return err
		}
	}
	return nil
}

// sleep waits d or until ctx ends, and then returns ctx's error, which a
// fault's step passes on. The harness paces faults with it; it is never
// used to wait for a condition.
func sleep(ctx context.Context, d time.Duration) error {
	if !consume.Sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}

// suffix returns a short random name part.
func suffix() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
