package api_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// npmDir holds the npm tools' package.json, package-lock.json (with no
// registry host in it: see its .npmrc) and Spectral's ruleset.
var npmDir = filepath.Join("..", "gencheck", "npm")

// npmFiles are what `npm ci` installs from; a change to any of them is
// another installation.
var npmFiles = []string{"package.json", "package-lock.json", ".npmrc"}

// exampleImport is the import docs/api.md's TypeScript example makes of
// the generated types: the test writes them under that name.
const exampleImport = `from "./herald-api"`

// testNPMTools lints doc with Spectral and compiles docs/api.md's
// TypeScript example against the types openapi-typescript generates from
// it. Without node and npm the subtest is skipped, or fails under
// HERALD_REQUIRE_SERVICES=1 (scripts/services.sh installs them).
func testNPMTools(t *testing.T, doc []byte) {
	node := npmInstall(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "openapi.json"), doc, 0o644))

	t.Run("spectral", func(t *testing.T) {
		t.Parallel()
		ruleset, err := filepath.Abs(filepath.Join(npmDir, "spectral.yaml"))
		require.NoError(t, err)
		out, err := node.run(t, dir, "spectral", "lint", "--ruleset", ruleset, "--fail-severity", "warn", "--format", "text", "openapi.json")
		require.NoError(t, err, "Spectral (spectral:oas) finds faults in the served document:\n%s", out)
	})
	t.Run("typescript", func(t *testing.T) {
		t.Parallel()
		example := docTypeScript(t)
		require.Contains(t, example, exampleImport, "docs/api.md's TypeScript example imports the generated types")
		out, err := node.run(t, dir, "openapi-typescript", "openapi.json", "--output", "herald-api.ts")
		require.NoError(t, err, "openapi-typescript refuses the served document:\n%s", out)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "example.ts"), []byte(example), 0o644))
		// The example as a browser or Node.js 18+ runs it: fetch from the
		// DOM library, no @types packages.
		tsconfig := `{
  "compilerOptions": {
    "strict": true, "noEmit": true, "target": "es2022", "module": "es2022",
    "moduleResolution": "bundler", "lib": ["es2022", "dom"], "types": []
  },
  "files": ["example.ts"]
}
`
		require.NoError(t, os.WriteFile(filepath.Join(dir, "tsconfig.json"), []byte(tsconfig), 0o644))
		out, err = node.run(t, dir, "tsc", "--project", "tsconfig.json", "--strict", "--pretty", "false")
		require.NoError(t, err, "docs/api.md's TypeScript example does not compile against the generated types:\n%s\n--- example.ts\n%s", out, example)
	})
}

// npmTools runs the installed tools' executables with node.
type npmTools struct {
	node string
	bin  string // node_modules/.bin
}

func (n npmTools) run(t *testing.T, dir, tool string, args ...string) (string, error) {
	t.Helper()
	start := time.Now()
	cmd := exec.CommandContext(t.Context(), n.node, append([]string{filepath.Join(n.bin, tool)}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "FORCE_COLOR=0")
	out, err := cmd.CombinedOutput()
	t.Logf("%s %s: %s", tool, strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	if err != nil {
		return string(out), fmt.Errorf("%s: %w", tool, err)
	}
	return string(out), nil
}

// npmInstall installs the pinned tools with `npm ci` into
// internal/gencheck/npm/.cache/<hash of npmFiles>, once: a warm run finds
// them there. The installation is made in a directory of its own and
// renamed into place, so that one cut short is never taken for complete.
// npm's download cache is .cache/npm beside it (the whole .cache is
// ignored by git; delete it for a cold run).
func npmInstall(t *testing.T) npmTools {
	t.Helper()
	node, errNode := exec.LookPath("node")
	npm, errNPM := exec.LookPath("npm")
	if err := errors.Join(errNode, errNPM); err != nil {
		msg := strings.ReplaceAll(err.Error(), "\n", "; ")
		if os.Getenv(testenv.RequireVar) == "1" {
			t.Fatalf("%s and %s=1: node and npm run the OpenAPI linter and the TypeScript check (scripts/services.sh installs Debian's nodejs and npm)", msg, testenv.RequireVar)
		}
		t.Skipf("%s: the OpenAPI linter and the TypeScript check are not run", msg)
	}

	h := sha256.New()
	files := map[string][]byte{}
	for _, name := range npmFiles {
		b, err := os.ReadFile(filepath.Join(npmDir, name))
		require.NoError(t, err)
		files[name] = b
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
	}
	require.NotContains(t, string(files["package-lock.json"]), `"resolved"`, "package-lock.json names no registry: install with its .npmrc")
	key := hex.EncodeToString(h.Sum(nil))[:16]
	cache, err := filepath.Abs(filepath.Join(npmDir, ".cache"))
	require.NoError(t, err)
	dir := filepath.Join(cache, key)
	tools := npmTools{node: node, bin: filepath.Join(dir, "node_modules", ".bin")}
	if _, err := os.Stat(tools.bin); err == nil {
		return tools
	}

	require.NoError(t, os.MkdirAll(cache, 0o755))
	tmp, err := os.MkdirTemp(cache, key+".tmp-")
	require.NoError(t, err)
	defer func() { _ = os.RemoveAll(tmp) }()
	for name, b := range files {
		require.NoError(t, os.WriteFile(filepath.Join(tmp, name), b, 0o644))
	}
	start := time.Now()
	cmd := exec.CommandContext(t.Context(), npm, "ci", "--prefer-offline", "--no-audit", "--no-fund", "--ignore-scripts")
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(cache, "npm"), "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "npm ci in %s:\n%s", npmDir, out)
	t.Logf("npm ci: %s", time.Since(start).Round(time.Millisecond))
	if err := os.Rename(tmp, dir); err != nil {
		// Another run installed the same files meanwhile: use theirs.
		_, statErr := os.Stat(tools.bin)
		require.NoError(t, statErr, "install the npm tools: %v", err)
		return tools
	}
	// Installations of files that changed since are of no more use.
	entries, err := os.ReadDir(cache)
	require.NoError(t, err)
	for _, e := range entries {
		if e.IsDir() && e.Name() != key && e.Name() != "npm" && !strings.Contains(e.Name(), ".tmp-") {
			_ = os.RemoveAll(filepath.Join(cache, e.Name()))
		}
	}
	return tools
}

// docTypeScript returns docs/api.md's TypeScript example: the first ```ts
// block of its "## TypeScript" section, its indentation removed.
func docTypeScript(t *testing.T) string {
	t.Helper()
	const heading = "## TypeScript"
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "api.md"))
	require.NoError(t, err)
	_, section, ok := bytes.Cut(b, []byte("\n"+heading+"\n"))
	require.True(t, ok, "docs/api.md has no %q section", heading)
	if end := bytes.Index(section, []byte("\n## ")); end >= 0 {
		section = section[:end]
	}
	var code []string
	indent, in := "", false
	for line := range strings.SplitSeq(string(section), "\n") {
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case !in && trimmed == "```ts":
			indent, in = line[:len(line)-len(trimmed)], true
		case in && trimmed == "```":
			return strings.Join(code, "\n") + "\n"
		case in:
			code = append(code, strings.TrimPrefix(line, indent))
		}
	}
	require.Fail(t, "no TypeScript example", "docs/api.md, section %q: no ```ts block (closed by ```) to compile", heading)
	return ""
}
