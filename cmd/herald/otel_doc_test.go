package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The README's table of OTEL_* variables names exactly the variables
// trace.go reads: a variable added to the code without a row, or a row for
// one the code no longer reads, fails here.
func TestReadmeOTELVariables(t *testing.T) {
	src, err := os.ReadFile("trace.go")
	require.NoError(t, err)
	var code []string
	for _, m := range regexp.MustCompile(`"(OTEL_[A-Z_]+)"`).FindAllStringSubmatch(string(src), -1) {
		code = append(code, m[1])
	}
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	var doc []string
	name := regexp.MustCompile("`(OTEL_[A-Z_]+)`")
	for line := range strings.SplitSeq(string(readme), "\n") {
		if !strings.HasPrefix(line, "| `OTEL_") {
			continue
		}
		first := strings.SplitN(line, "|", 3)[1]
		for _, m := range name.FindAllStringSubmatch(first, -1) {
			doc = append(doc, m[1])
		}
	}
	slices.Sort(code)
	code = slices.Compact(code)
	slices.Sort(doc)
	require.NotEmpty(t, code, "trace.go names no OTEL_* variable")
	require.Equal(t, code, doc, "README.md's OTEL_* table (first column) against the variables cmd/herald/trace.go reads")
}
