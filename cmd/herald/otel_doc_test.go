package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The table of OTEL_* variables in docs/operations.md names exactly the
// variables trace.go reads: a variable added to the code without a row, or
// a row for one the code no longer reads, fails here.
func TestOTELVariablesDoc(t *testing.T) {
	src, err := os.ReadFile("trace.go")
	require.NoError(t, err)
	var code []string
	for _, m := range regexp.MustCompile(`"(OTEL_[A-Z_]+)"`).FindAllStringSubmatch(string(src), -1) {
		code = append(code, m[1])
	}
	doc, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	var rows []string
	name := regexp.MustCompile("`(OTEL_[A-Z_]+)`")
	for line := range strings.SplitSeq(string(doc), "\n") {
		if !strings.HasPrefix(line, "| `OTEL_") {
			continue
		}
		first := strings.SplitN(line, "|", 3)[1]
		for _, m := range name.FindAllStringSubmatch(first, -1) {
			rows = append(rows, m[1])
		}
	}
	slices.Sort(code)
	code = slices.Compact(code)
	slices.Sort(rows)
	require.NotEmpty(t, code, "trace.go names no OTEL_* variable")
	require.Equal(t, code, rows, "docs/operations.md's OTEL_* table (first column) against the variables cmd/herald/trace.go reads")
}
