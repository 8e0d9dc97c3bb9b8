package main

import (
	"errors"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// benchTestServers are the test helpers a default build links, by the last
// element of their path, each for herald bench: the in-process SMTP sink of
// --channel email (smtptest) and the webhook receiver's signature check of
// --channel webhook (webhooktest, through internal/bench). A build with
// -tags nobench links none.
var benchTestServers = []string{"smtptest", "webhooktest"}

// testHelper reports whether a package of this module is a test helper: a
// suite, a fake or a harness (smtptest, storetest, pgtest, sqstest,
// testenv, testlog, anything under testkit), or the fault proxy and the
// private PostgreSQL cluster of the tests and the chaos harness.
func testHelper(pkg string) bool {
	name := path.Base(pkg)
	return strings.HasSuffix(name, "test") || strings.HasPrefix(name, "test") ||
		strings.Contains(pkg, "/testkit/") || name == "faultproxy" || name == "pgcluster"
}

// linkedTestHelpers lists, with go list, the test helpers of this module
// the herald binary built with tags links (by the last element of their
// path), and whether it links the standard library's testing or httptest.
func linkedTestHelpers(t *testing.T, tags string) (helpers []string, stdTesting []string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command, to list herald's dependencies")
	module := goOutput(t, goBin, "list", "-m")
	out := goOutput(t, goBin, "list", "-deps", "-tags", tags, "./")
	for _, pkg := range strings.Fields(out) {
		switch {
		case pkg == "testing" || pkg == "net/http/httptest":
			stdTesting = append(stdTesting, pkg)
		case strings.HasPrefix(pkg, module+"/") && testHelper(pkg):
			helpers = append(helpers, path.Base(pkg))
		}
	}
	slices.Sort(helpers)
	return helpers, stdTesting
}

// goOutput runs the go command in this package's directory and returns
// its output, trimmed.
func goOutput(t *testing.T, goBin string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), goBin, args...)
	cmd.Env = os.Environ()
	out, err := cmd.Output()
	var stderr []byte
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		stderr = ee.Stderr
	}
	require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), stderr)
	return strings.TrimSpace(string(out))
}

// The shipped binary (built with -tags nobench, as the Dockerfile builds
// it) links no test server, no test helper and not the testing package;
// the default build links only the test servers herald bench runs.
func TestShippedBinaryLinksNoTestServer(t *testing.T) {
	t.Parallel()
	t.Run("nobench", func(t *testing.T) {
		t.Parallel()
		helpers, std := linkedTestHelpers(t, "nobench")
		require.Empty(t, helpers, "herald built with -tags nobench links test helpers; the file that imports them needs //go:build !nobench")
		require.Empty(t, std, "herald built with -tags nobench links the standard library's test packages")
	})
	t.Run("default", func(t *testing.T) {
		t.Parallel()
		helpers, _ := linkedTestHelpers(t, "")
		require.Equal(t, benchTestServers, helpers, "the test helpers a default herald links are herald bench's (benchTestServers); anything else belongs in a test file")
	})
	t.Run("Dockerfile", func(t *testing.T) {
		t.Parallel()
		var builds []string
		for line := range strings.Lines(readRepoFile(t, "Dockerfile")) {
			if strings.Contains(line, "go build") && strings.Contains(line, "./cmd/herald") {
				builds = append(builds, strings.TrimSpace(line))
			}
		}
		require.NotEmpty(t, builds, "the Dockerfile builds ./cmd/herald")
		for _, b := range builds {
			require.Regexp(t, `-tags[ =]\S*\bnobench\b`, b, "the Dockerfile builds the shipped herald with -tags nobench")
		}
	})
}
