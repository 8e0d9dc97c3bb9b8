package testkit_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/heraldhq/herald/"

// The packages outside internal/testkit allowed to import a test helper in
// their non-test files, and which: herald bench's receivers, and the chaos
// harness (a test harness itself).
var mayImport = map[string][]string{
	"cmd/herald":              {"smtptest"},
	"internal/bench/provider": {"webhooktest"},
	"cmd/herald-chaos":        {"faultproxy", "pgcluster", "proctest", "smtptest", "sqstest", "webhooktest"},
}

// No product package imports a test helper in its non-test files, but
// herald bench's and the chaos harness's, and those only the helpers
// listed.
func TestOnlyBenchAndChaosImportTestkit(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		if strings.HasPrefix(pkg, "internal/testkit") || pkg == fields[0] {
			continue
		}
		seen++
		for _, imp := range fields[1:] {
			helper, ok := strings.CutPrefix(imp, module+"internal/testkit/")
			if !ok {
				continue
			}
			require.True(t, slices.Contains(mayImport[pkg], helper), "%s imports the test helper %s", pkg, imp)
		}
	}
	require.Greater(t, seen, 30, "go list listed too few packages: %s", out)
}
