package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// herald notifications create --priority: the notification keeps its
// priority, which show prints; a bad one is a usage error naming the
// flag, and writes nothing.
func TestNotificationsCreatePriority(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "h.db")
	env := func(string) string { return "" }
	herald := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(t.Context(), append([]string{"--database-url", db}, args...), env, &out, &out)
		return out.String(), err
	}
	_, err := herald("migrate")
	require.NoError(t, err)

	out, err := herald("notifications", "create", "--user-id", "u", "--to", "ada@example.com", "--subject", "s", "--body", "b",
		"--priority", "high", "--json")
	require.NoError(t, err, out)
	var n struct {
		ID       string `json:"id"`
		Priority string `json:"priority"`
	}
	require.NoError(t, json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &n), out)
	require.Equal(t, "high", n.Priority)
	out, err = herald("notifications", "show", n.ID)
	require.NoError(t, err, out)
	require.Regexp(t, `(?m)^priority\s+high$`, out)

	out, err = herald("notifications", "create", "--user-id", "u", "--to", "ada@example.com", "--subject", "s", "--body", "b",
		"--priority", "asap")
	require.Error(t, err)
	require.Contains(t, err.Error()+out, "--priority: must be one of high, normal, bulk")
	out, err = herald("notifications", "list", "--json")
	require.NoError(t, err, out)
	require.Equal(t, 1, strings.Count(out, `"id"`), "the refused create wrote nothing: %s", out)
}
