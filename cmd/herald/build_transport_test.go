package main

import (
	"encoding/json"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// The OpenAPI document's transport enum (what GET /status reports) is a
// generated-doc row of each transport, not a registration: it lists the
// transport table's names, in the table's order, and nothing else.
func TestOpenAPITransportEnum(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas struct {
				DeploymentStatus struct {
					Properties struct {
						Transport struct {
							Enum []string `json:"enum"`
						} `json:"transport"`
					} `json:"properties"`
				} `json:"DeploymentStatus"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal([]byte(readRepoFile(t, "internal/api/openapi.json")), &doc))
	names := make([]string, 0, len(transports))
	for _, k := range transports {
		names = append(names, k.name)
	}
	require.Equal(t, names, doc.Components.Schemas.DeploymentStatus.Properties.Transport.Enum,
		"internal/api/openapi.json, DeploymentStatus.transport: the enum is the names of the transports table (cmd/herald/build_transport.go)")
}

// Every broker's row has its bench hook, which herald bench needs to remove
// its scratch names; the outbox table's row, which has no broker, has none.
func TestTransportRowsBenchHook(t *testing.T) {
	t.Parallel()
	for _, k := range transports {
		require.NotNil(t, k.open, "transport %s: no constructor", k.name)
		if slices.Contains(k.schemes, "") {
			require.Nil(t, k.bench, "transport %s: no broker, so no bench hook", k.name)
			continue
		}
		require.NotNil(t, k.bench, "transport %s: its row has no bench hook (transport_%s.go)", k.name, k.name)
	}
}

// docs/benchmarks.md's report tables name the store and transport values a
// report can carry: the names of the stores and transports tables, in
// their order.
func TestBenchDocNamesTheRows(t *testing.T) {
	t.Parallel()
	doc := readRepoFile(t, "docs/benchmarks.md")
	values := func(field string) []string {
		t.Helper()
		m := regexp.MustCompile("(?m)^\\| `" + field + "` \\| the " + field + ": (.*) \\|$").FindStringSubmatch(doc)
		require.NotNil(t, m, "docs/benchmarks.md: the report's %s row lists no values", field)
		return codeSpans(m[1])
	}
	var ss, ts []string
	for _, e := range stores {
		ss = append(ss, e.name)
	}
	for _, k := range transports {
		ts = append(ts, k.name)
	}
	require.Equal(t, ss, values("store"), "docs/benchmarks.md, the report's store row: the stores table's names (cmd/herald/build_store.go)")
	require.Equal(t, ts, values("transport"), "docs/benchmarks.md, the report's transport row: the transports table's names (cmd/herald/build_transport.go)")
}
