package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The README's package table ("| package | owns |") names every package of
// the module, and only packages that exist: a package added without a row,
// or a row left for a package removed or renamed, fails here.
func TestReadmePackageTable(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	var doc []string
	inTable := false
	name := regexp.MustCompile("`([a-z0-9/._-]+)`")
	for line := range strings.SplitSeq(string(readme), "\n") {
		switch {
		case strings.HasPrefix(line, "| package | owns |"):
			inTable = true
			continue
		case !inTable:
			continue
		case !strings.HasPrefix(line, "|"):
			inTable = false
			continue
		case strings.HasPrefix(line, "|---"):
			continue
		}
		first := strings.SplitN(line, "|", 3)[1]
		for _, m := range name.FindAllStringSubmatch(first, -1) {
			doc = append(doc, m[1])
		}
	}
	require.NotEmpty(t, doc, "README.md has no package table")

	// The module's packages: directories holding Go files, without the
	// modules of their own (a go.mod below the root) and testdata.
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	var code []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			base := d.Name()
			if path != root && (strings.HasPrefix(base, ".") || base == "testdata" || base == "node_modules") {
				return filepath.SkipDir
			}
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			if !slices.Contains(code, filepath.ToSlash(rel)) {
				code = append(code, filepath.ToSlash(rel))
			}
		}
		return nil
	})
	require.NoError(t, err)
	code = slices.DeleteFunc(code, func(p string) bool { return p == "." })
	slices.Sort(code)
	slices.Sort(doc)
	doc = slices.Compact(doc)
	require.Equal(t, code, doc, "README.md's package table against the module's packages")
}
