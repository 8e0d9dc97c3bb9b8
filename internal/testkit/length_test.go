package testkit_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// maxFuncLines bounds a function of the product or its helpers, its
// declaration to its closing brace: past it, a function does several
// things, and each wants a name.
const maxFuncLines = 120

// Every function in a non-test file of the module is at most maxFuncLines
// long (tests may run longer: a scenario reads top to bottom).
func TestNoLongFunctions(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	require.NoError(t, err)
	root := filepath.Dir(strings.TrimSpace(string(out)))
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			from, to := fset.Position(fn.Pos()), fset.Position(fn.End())
			rel, _ := filepath.Rel(root, path)
			assert.LessOrEqual(t, to.Line-from.Line+1, maxFuncLines, "%s:%d: %s is %d lines long", rel, from.Line, fn.Name.Name, to.Line-from.Line+1)
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, files, 300, "too few files read under %s", root)
}
