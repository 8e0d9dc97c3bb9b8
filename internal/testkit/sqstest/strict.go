package sqstest

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/testkit/testenv"
	"github.com/heraldhq/herald/internal/testkit/testlog"
)

// The stricter emulator: local-aws-sqs, an npm package pinned in npm/
// (package.json and its lock). Where goaws is lenient it is SQS's strict
// self: CreateQueue refuses a name that exists with other attributes
// (QueueAlreadyExists), a receive's VisibilityTimeout holds, receipts are
// counted, DelaySeconds and redrive policies are honoured; and it speaks
// both SQS protocols (Query and JSON). Its gaps:
//   - a long poll holds until it has as many messages as it was asked for
//     (or its wait ends), where SQS answers with the first, and hands a
//     message whose visibility ran out meanwhile out again in the same
//     answer: the launcher, npm/serve.js, makes it answer as SQS does;
//   - FIFO groups are not locked: a group's next message may be received
//     while one before it is in flight (tests of per-user order run on
//     goaws, whose shim locks them);
//   - nothing in an answer is XML-escaped, so a body or attribute holding
//     <, > or & breaks the Query protocol's answer.
//
//go:embed npm/package.json npm/package-lock.json npm/.npmrc npm/serve.js
var npmFiles embed.FS

// strictTimeout bounds npm ci and the emulator's start.
const strictTimeout = 2 * time.Minute

// Strict is one local-aws-sqs process of a test's own, on a free port of
// 127.0.0.1. t.Cleanup stops it.
type Strict struct {
	addr string
}

// URL is the emulator's endpoint, for Config.Endpoint.
func (s *Strict) URL() string { return "http://" + s.addr }

// BrokerURL is an HERALD_BROKER_URL for queues named after prefix.
func (s *Strict) BrokerURL(prefix string, fifo bool) string {
	u := "sqs://" + Region + "/" + prefix + "?endpoint=" + s.URL()
	if fifo {
		u += "&fifo=true"
	}
	return u
}

// StartStrict starts local-aws-sqs for the test and stops it when the
// test ends. It needs node and npm on PATH: without them the test skips,
// or fails when HERALD_REQUIRE_SERVICES=1. The package is installed once
// (npm ci, from the pinned lock) into a directory of the user's cache
// named after the lock's hash, and shared by later runs.
//
// Like Start it makes the AWS SDK's default chain find static test
// credentials.
func StartStrict(t testing.TB) *Strict {
	t.Helper()
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv(testenv.RequireVar) == "1" {
				t.Fatalf("%s is not on PATH and %s=1: the tests on the stricter SQS emulator (local-aws-sqs) must run", bin, testenv.RequireVar)
			}
			t.Skipf("%s is not on PATH; install Node.js and npm to run the tests on the stricter SQS emulator (local-aws-sqs)", bin)
		}
	}
	if err := setCredentials(); err != nil {
		t.Fatalf("test credentials: %v", err)
	}
	installOnce.Do(func() { installDir, installErr = install() })
	if installErr != nil {
		t.Fatalf("install local-aws-sqs: %v", installErr)
	}
	s, stop, err := launchStrict(installDir)
	if err != nil {
		t.Fatalf("start local-aws-sqs: %v", err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("stop local-aws-sqs: %v", err)
		}
	})
	return s
}

var (
	installOnce sync.Once
	installDir  string
	installErr  error
)

// install runs npm ci on the embedded package files in a directory of the
// user's cache named after their hash, unless an earlier run did, and
// returns it. A fresh install goes to a directory of its own first and is
// renamed into place, so that test binaries installing at once never see
// half of one.
func install() (string, error) {
	h := sha256.New()
	files := []string{"package.json", "package-lock.json", ".npmrc", "serve.js"}
	for _, f := range files {
		b, err := npmFiles.ReadFile("npm/" + f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(b))
		h.Write(b)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	parent := filepath.Join(cache, "herald-sqstest")
	dir := filepath.Join(parent, "local-aws-sqs-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "local-aws-sqs", "package.json")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(parent, "install-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	for _, f := range files {
		b, _ := npmFiles.ReadFile("npm/" + f)
		if err := os.WriteFile(filepath.Join(tmp, f), b, 0o644); err != nil {
			return "", err
		}
	}
	cmd := exec.Command("npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund")
	cmd.Dir = tmp
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("npm ci: %w", err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return "", fmt.Errorf("npm ci: %w\n%s", err, out.String())
		}
	case <-time.After(strictTimeout):
		_ = cmd.Process.Kill()
		<-done
		return "", fmt.Errorf("npm ci did not finish within %s\n%s", strictTimeout, out.String())
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another test binary installed it first: use that one.
		if _, serr := os.Stat(filepath.Join(dir, "node_modules", "local-aws-sqs", "package.json")); serr == nil {
			return dir, nil
		}
		return "", err
	}
	return dir, nil
}

// launchStrict starts serve.js in dir on a free port and waits for it to
// say where it listens. Its standard input is a pipe this process holds:
// the emulator exits when it closes, so it never outlives a test binary
// that was killed.
func launchStrict(dir string) (*Strict, func() error, error) {
	cmd := exec.Command("node", "serve.js", "0")
	cmd.Dir = dir
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	var stderr testlog.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("node serve.js: %w", err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		exited <- cmd.Wait()
	}()
	stop := func() error {
		_ = stdin.Close()
		select {
		case <-exited:
			return nil // its exit status on a closed input is of no interest
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			return errors.New("it did not exit within 5s of its input closing; killed")
		}
	}
	select {
	case line := <-lines:
		addr, ok := strings.CutPrefix(line, "listening ")
		if !ok {
			_ = stop()
			return nil, nil, fmt.Errorf("unexpected first line %q\n%s", line, stderr.String())
		}
		return &Strict{addr: addr}, stop, nil
	case err := <-exited:
		return nil, nil, fmt.Errorf("it exited at start: %v\n%s", err, stderr.String())
	case <-time.After(strictTimeout):
		_ = stop()
		return nil, nil, fmt.Errorf("it did not listen within %s\n%s", strictTimeout, stderr.String())
	}
}
