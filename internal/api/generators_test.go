package api_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/heraldhq/herald/internal/api"
)

// The served document is one that the tools people use accept. In Go,
// oapi-codegen and ogen, at the versions pinned in internal/gencheck/go.mod
// (a module of its own, so that neither they nor what their code needs at
// run time enter herald's go.mod), each generate a client from GET
// /openapi.json, and the generated code compiles. The generators are built
// once into the Go build cache (`go tool`); a cold run downloads and
// compiles them, a warm one takes seconds. From npm, at the versions pinned
// in internal/gencheck/npm (see testNPMTools): Spectral lints the document
// with its spectral:oas rules (a warning fails too), and openapi-typescript
// generates TypeScript types that docs/api.md's TypeScript example compiles
// against under tsc --strict. -short skips it.
func TestGeneratorsAcceptDocument(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the generators are not run")
	}
	t.Parallel()
	e := setup(t, api.Config{})
	resp, err := http.Get(e.url + "/openapi.json")
	require.NoError(t, err)
	doc, err := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)

	t.Run("go", func(t *testing.T) {
		t.Parallel()
		testGoGenerators(t, doc)
	})
	t.Run("npm", func(t *testing.T) {
		t.Parallel()
		testNPMTools(t, doc)
	})
}

// testGoGenerators generates a client from doc with oapi-codegen and with
// ogen, and compiles both.
func testGoGenerators(t *testing.T, doc []byte) {
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command runs the generators")

	dir := t.TempDir()
	for _, name := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join("..", "gencheck", name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "openapi.json"), doc, 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "oapi"), 0o755))

	goCmd := func(args ...string) error {
		start := time.Now()
		cmd := exec.CommandContext(t.Context(), goBin, args...)
		cmd.Dir = dir
		// The module's own go.mod and go.sum, nothing else: no workspace,
		// no vendor directory, no change to them; -trimpath, so that an
		// unchanged document compiles from the build cache whatever the
		// temporary directory.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly -trimpath")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("go %s: %s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
		return nil
	}
	// The generators write to their own directories: run them at once.
	var g errgroup.Group
	g.Go(func() error {
		return goCmd("tool", "oapi-codegen", "-generate", "types,client", "-package", "oapi", "-o", "oapi/client.go", "openapi.json")
	})
	g.Go(func() error {
		return goCmd("tool", "ogen", "-target", "ogen", "-package", "ogen", "-clean", "openapi.json")
	})
	require.NoError(t, g.Wait())
	for _, f := range []string{"oapi/client.go", "ogen/oas_client_gen.go", "ogen/oas_schemas_gen.go"} {
		_, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err, "%s was not generated", f)
	}
	require.NoError(t, goCmd("build", "./oapi", "./ogen"))
}
