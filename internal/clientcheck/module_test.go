package clientcheck_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// clientGo is the client module's go directive: the lowest Go its code
// builds with (iter.Seq2, range over functions: Go 1.23).
const clientGo = "1.23"

// goCmd runs the go command in dir with no workspace, no network and the
// toolchain at hand, and returns its output.
func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err)
	cmd := exec.CommandContext(t.Context(), goBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off", "GOTOOLCHAIN=local")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

// The client module requires nothing, and says the Go it needs.
func TestClientModuleFile(t *testing.T) {
	t.Parallel()
	dir, err := filepath.Abs(filepath.Join("..", "..", "client"))
	require.NoError(t, err)
	var mod struct {
		Module  struct{ Path string }
		Go      string
		Require []struct{ Path string }
		Replace []struct{}
	}
	require.NoError(t, json.Unmarshal([]byte(goCmd(t, dir, "mod", "edit", "-json")), &mod))
	require.Equal(t, "github.com/heraldhq/herald/client", mod.Module.Path)
	require.Equal(t, clientGo, mod.Go)
	require.Empty(t, mod.Require, "the client needs the standard library only")
	require.Empty(t, mod.Replace)
	_, err = os.Stat(filepath.Join(dir, "go.sum"))
	require.ErrorIs(t, err, os.ErrNotExist, "nothing to sum")
}

// A program that uses the client (a module outside this repository, as a
// user's) gets the client's module and the standard library, nothing of
// the server's: no SQLite, Prometheus or pgx in its module graph or
// build, and no higher go directive than the client's.
func TestClientUserGetsClientOnly(t *testing.T) {
	t.Parallel()
	clientDir, err := filepath.Abs(filepath.Join("..", "..", "client"))
	require.NoError(t, err)
	dir := t.TempDir()
	gomod := fmt.Sprintf("module example.com/user\n\ngo %s\n\nrequire github.com/heraldhq/herald/client v0.0.0\n\nreplace github.com/heraldhq/herald/client => %s\n", clientGo, clientDir)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	main := `package main

import (
	"context"
	"fmt"

	"github.com/heraldhq/herald/client"
)

func main() {
	c, err := client.New("http://127.0.0.1:8080")
	if err != nil {
		panic(err)
	}
	for n, err := range c.ListAll(context.Background(), client.ListOptions{}) {
		fmt.Println(n.ID, err)
	}
}
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(main), 0o644))

	mods := strings.Fields(goCmd(t, dir, "list", "-m", "-f", "{{.Path}}", "all"))
	require.Equal(t, []string{"example.com/user", "github.com/heraldhq/herald/client"}, mods)
	deps := strings.Fields(goCmd(t, dir, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "."))
	require.ElementsMatch(t, []string{"example.com/user", "github.com/heraldhq/herald/client"}, deps)
	goCmd(t, dir, "build", "-o", os.DevNull, ".")
	goCmd(t, dir, "mod", "tidy")
	_, err = os.Stat(filepath.Join(dir, "go.sum"))
	require.ErrorIs(t, err, os.ErrNotExist, "a user's go.sum gets nothing from the client")
}
