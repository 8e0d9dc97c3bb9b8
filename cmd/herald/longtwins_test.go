package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// longTwins maps each test that make test runs shortened to its twin at
// full length, which builds only with the long tag (make test-long).
var longTwins = map[string]string{
	"TestThrottlingProviderNotHammered": "TestLongThrottlingProviderNotHammered",
	"TestProviderAuthRefusedThenFixed":  "TestLongProviderAuthRefusedForAMinute",
	"TestProviderDownThenBack":          "TestLongProviderDownForThreeMinutes",
	"TestProviderGreylisting":           "TestLongProviderGreylistingForTwoMinutes",
}

// Every shortened test has its long twin, in a file built only with the
// long tag, and make test-long runs it: nothing else would notice a twin
// renamed or gone, since make test does not build it.
func TestLongTwinsExist(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	short, long := map[string]bool{}, map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, parser.ParseComments)
		require.NoError(t, err)
		tagged := false
		for _, c := range file.Comments {
			if c.Pos() < file.Package && strings.TrimSpace(c.Text()) == "" && strings.Contains(c.List[0].Text, "go:build long") {
				tagged = true
			}
		}
		for _, d := range file.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") {
				if tagged {
					long[fn.Name.Name] = true
				} else {
					short[fn.Name.Name] = true
				}
			}
		}
	}
	makefile, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	require.NoError(t, err)
	require.Contains(t, string(makefile), `-tags long -run '^TestLong' ./cmd/herald/`, "make test-long runs the long twins")
	for s, l := range longTwins {
		require.True(t, short[s], "%s runs in make test", s)
		require.True(t, long[l], "%s, the long twin of %s, is a test built only with the long tag", l, s)
		require.True(t, strings.HasPrefix(l, "TestLong"), "%s: make test-long runs ^TestLong", l)
	}
}
