package bench

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docs/benchmarks.md's table of the report's fields names exactly the
// report's JSON fields, in the report's order: a field added, renamed or
// removed without the table fails here.
func TestReportFieldsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/benchmarks.md")
	require.NoError(t, err)
	_, table, ok := strings.Cut(string(b), "**The report's fields**")
	require.True(t, ok, "docs/benchmarks.md has no table of the report's fields")
	_, table, ok = strings.Cut(table, "| field | meaning |")
	require.True(t, ok, "the table of the report's fields has no header")
	table, _, _ = strings.Cut(table, "\n\n") // the table ends at the first blank line
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9_]+)` \\|").FindAllStringSubmatch(table, -1) {
		documented = append(documented, m[1])
	}
	var fields []string
	rt := reflect.TypeFor[Report]()
	for i := range rt.NumField() {
		if name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			fields = append(fields, name)
		}
	}
	require.NotEmpty(t, fields)
	require.Equal(t, fields, documented, "docs/benchmarks.md's table of the report's fields")
}
