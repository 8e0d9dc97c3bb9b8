package main

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the generated docs")

// docs/configuration.md is generated from the settings table: a setting
// added without regenerating it fails here.
func TestConfigurationDoc(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "configuration.md")
	want := configurationDoc()
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(want), 0o644))
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, want, string(got), "docs/configuration.md is stale: go test ./cmd/herald -run TestConfigurationDoc -update")
	for _, s := range settings {
		require.Contains(t, string(got), "`"+s.env+"`")
	}
}
