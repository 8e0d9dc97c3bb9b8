package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/testkit/proctest"
)

// NATSOptions shapes a nats-server of a test's own.
type NATSOptions struct {
	// User and Pass, when set, are the only credentials the server takes.
	User, Pass string
}

// NATS is a nats-server with JetStream that a test started on a free port of
// 127.0.0.1, with a store directory of its own, so that the test may stop
// and restart it (never the machine's server). t.Cleanup stops it.
type NATS struct {
	t    testing.TB
	opts NATSOptions
	// Port is the client port; it stays the same across restarts.
	Port int
	// Dir is the JetStream store directory; it outlives a restart.
	Dir  string
	proc *proctest.Proc
}

// StartNATS starts a nats-server (the binary must be on PATH: the test
// skips without it, and fails when HERALD_REQUIRE_SERVICES=1) and waits
// until it takes connections.
func StartNATS(t testing.TB, o NATSOptions) *NATS {
	t.Helper()
	if _, err := exec.LookPath("nats-server"); err != nil {
		if os.Getenv(RequireVar) == "1" {
			t.Fatalf("nats-server is not on PATH and %s=1: this integration test must run", RequireVar)
		}
		t.Skip("nats-server is not on PATH; install it to run this integration test")
	}
	s := &NATS{t: t, opts: o, Port: FreePort(t), Dir: t.TempDir()}
	// nats-server 2.9 creates an account's stream directory on the first
	// stream create, and several creates at once on a fresh store race for
	// it ("could not create storage directory"): have it ready.
	if err := os.MkdirAll(filepath.Join(s.Dir, "jetstream", "$G", "streams"), 0o750); err != nil {
		t.Fatalf("nats store directory: %v", err)
	}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's client URL, with the credentials when it has some.
func (s *NATS) URL() string {
	if s.opts.User != "" {
		return fmt.Sprintf("nats://%s:%s@127.0.0.1:%d", s.opts.User, s.opts.Pass, s.Port)
	}
	return fmt.Sprintf("nats://127.0.0.1:%d", s.Port)
}

// Start starts the server (again, after Stop or Kill) on the same port and
// store directory, and waits until it takes connections.
func (s *NATS) Start() {
	s.t.Helper()
	args := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(s.Port), "-js", "-sd", s.Dir}
	if s.opts.User != "" {
		args = append(args, "--user", s.opts.User, "--pass", s.opts.Pass)
	}
	p, err := proctest.Start(proctest.Spec{Bin: "nats-server", Args: args, Name: "nats-server :" + strconv.Itoa(s.Port)})
	if err != nil {
		s.t.Fatalf("start nats-server: %v", err)
	}
	s.proc = p
	deadline := time.Now().Add(15 * time.Second)
	for {
		if !p.Running() {
			s.t.Fatalf("nats-server exited at start: %v\n%s", p.Err(), p.Log())
		}
		// The server logs readiness once JetStream is up and the client
		// port listens.
		if p.LogContains("Server is ready") {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("nats-server not ready within 15s:\n%s", p.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop stops the server gracefully (SIGTERM), as an operator restarting it
// would. A stopped server stays stopped until Start.
func (s *NATS) Stop() {
	s.t.Helper()
	if s.proc == nil {
		return
	}
	if err := s.proc.Stop(15 * time.Second); err != nil {
		s.t.Errorf("stop nats-server: %v", err)
	}
	if s.t.Failed() {
		s.t.Logf("--- log of nats-server :%d ---\n%s", s.Port, s.proc.LogTail(8000))
	}
	s.proc = nil
}

// Kill kills the server (SIGKILL), as a crash would.
func (s *NATS) Kill() {
	if s.proc != nil {
		s.proc.Kill()
		s.proc = nil
	}
}

// FreePort returns a TCP port of 127.0.0.1 that nothing listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
