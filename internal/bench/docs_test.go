package bench

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docs/benchmarks.md's tables of the reports' fields name exactly the
// reports' JSON fields, in the reports' order: a field added, renamed or
// removed without its table fails here.
func TestReportFieldsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/benchmarks.md")
	require.NoError(t, err)
	for heading, rt := range map[string]reflect.Type{
		"**The report's fields**":           reflect.TypeFor[Report](),
		"**The broadcast report's fields**": reflect.TypeFor[BroadcastReport](),
	} {
		_, table, ok := strings.Cut(string(b), heading)
		require.True(t, ok, "docs/benchmarks.md has no %s", heading)
		_, table, ok = strings.Cut(table, "| field | meaning |")
		require.True(t, ok, "the table %s has no header", heading)
		table, _, _ = strings.Cut(table, "\n\n") // the table ends at the first blank line
		var documented []string
		for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9_]+)` \\|").FindAllStringSubmatch(table, -1) {
			documented = append(documented, m[1])
		}
		var fields []string
		for i := range rt.NumField() {
			if name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
				fields = append(fields, name)
			}
		}
		require.NotEmpty(t, fields)
		require.Equal(t, fields, documented, "docs/benchmarks.md's table %s", heading)
	}
}
