package proctest_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/proctest"
)

// sh starts a shell script as the process under test; the package does not
// care which binary it runs.
func sh(t *testing.T, script string, env map[string]string) *proctest.Proc {
	t.Helper()
	bin, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on PATH")
	}
	p, err := proctest.Start(proctest.Spec{Bin: bin, Args: []string{"-c", script}, Env: env, Name: "script"})
	require.NoError(t, err)
	t.Cleanup(p.Kill)
	return p
}

func TestExitStatusAndLog(t *testing.T) {
	t.Parallel()
	p := sh(t, `echo "out $GREETING"; echo err >&2; exit 3`, map[string]string{"GREETING": "hello"})
	require.NoError(t, p.WaitExit(context.Background(), 10*time.Second))
	require.False(t, p.Running())
	var exit *exec.ExitError
	require.True(t, errors.As(p.Err(), &exit), "exit status: %v", p.Err())
	require.Equal(t, 3, exit.ExitCode())
	require.True(t, p.LogContains("out hello"), "the environment reaches the process: %q", p.Log())
	require.True(t, p.LogContains("err"), "stderr is kept too")
	require.Equal(t, "err\n", p.LogTail(4))
	require.NoError(t, p.Stop(time.Second), "stopping an exited process is a no-op")
}

func TestEnvironmentIsClean(t *testing.T) {
	t.Setenv("PROCTEST_LEAK", "leaked")
	p := sh(t, `echo "[$PROCTEST_LEAK]"`, nil)
	require.NoError(t, p.WaitExit(context.Background(), 10*time.Second))
	require.NoError(t, p.Err())
	require.Equal(t, "[]\n", p.Log(), "only PATH, HOME and Env reach the process")
}

func TestStopSendsSIGTERM(t *testing.T) {
	t.Parallel()
	p := sh(t, `trap 'echo terminated; exit 0' TERM; echo ready; while :; do sleep 1; done`, nil)
	require.Eventually(t, func() bool { return p.LogContains("ready") }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, p.Stop(10*time.Second))
	require.NoError(t, p.Err())
	require.True(t, p.LogContains("terminated"))
}

func TestStopKillsAfterTimeout(t *testing.T) {
	t.Parallel()
	p := sh(t, `trap '' TERM; echo ready; while :; do sleep 1; done`, nil)
	require.Eventually(t, func() bool { return p.LogContains("ready") }, 10*time.Second, 10*time.Millisecond)
	require.Error(t, p.Stop(200*time.Millisecond), "a process ignoring SIGTERM is killed")
	require.False(t, p.Running())
}

func TestWaitExitTimesOut(t *testing.T) {
	t.Parallel()
	p := sh(t, `while :; do sleep 1; done`, nil)
	require.Error(t, p.WaitExit(context.Background(), 50*time.Millisecond))
	require.True(t, p.Running())
	require.NoError(t, p.Err(), "no exit status while it runs")
}

func TestLogFile(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on PATH")
	}
	path := filepath.Join(t.TempDir(), "p.log")
	p, err := proctest.Start(proctest.Spec{Bin: bin, Args: []string{"-c", "echo kept"}, LogFile: path})
	require.NoError(t, err)
	require.Equal(t, "-c echo kept", p.Name(), "the name defaults to the arguments")
	require.NoError(t, p.WaitExit(context.Background(), 10*time.Second))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "kept\n", string(b))
}

func TestWaitHTTP(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	require.NoError(t, proctest.WaitHTTP(context.Background(), srv.URL, 10*time.Second))
	require.EqualValues(t, 3, calls.Load(), "polls until 200")

	addr, err := proctest.FreeAddr()
	require.NoError(t, err)
	err = proctest.WaitHTTP(context.Background(), "http://"+addr, 100*time.Millisecond)
	require.ErrorContains(t, err, "did not answer 200 within 100ms")
}

// WaitLog waits for output the process writes later and gives up at its
// deadline on output that never comes.
func TestWaitLog(t *testing.T) {
	t.Parallel()
	gate := filepath.Join(t.TempDir(), "go")
	p := sh(t, `echo one; while [ ! -e "$GATE" ]; do sleep 0.02; done; echo two`, map[string]string{"GATE": gate})
	has := func(s string) func(string) bool { return func(log string) bool { return strings.Contains(log, s) } }
	require.NoError(t, p.WaitLog(context.Background(), 10*time.Second, has("one")))
	err := p.WaitLog(context.Background(), 100*time.Millisecond, has("two"))
	require.ErrorContains(t, err, "did not show what was awaited within 100ms", "two is written only once the gate exists")
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	require.NoError(t, p.WaitLog(context.Background(), 10*time.Second, has("two")))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, p.WaitLog(ctx, 10*time.Second, has("never")), context.Canceled)
}
