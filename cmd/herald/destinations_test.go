package main

import (
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/sqlite"
)

// herald destinations list and enable, from the database and through the
// API (--api-url), print the same: a table, or the API's JSON with times
// in UTC.
func TestDestinationsCommands(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "herald.db")
	st, err := sqlite.Open(t.Context(), path, sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	require.NoError(t, st.Migrate(t.Context()))
	const key = "https://hooks.example.com:443"
	for i := range 3 {
		_, err := st.Create(t.Context(), notify.NewNotification{Destination: key, Request: notify.CreateRequest{
			UserID: "u", Channel: "webhook", To: "https://hooks.example.com/" + strings.Repeat("x", i), Body: "{}"}})
		require.NoError(t, err)
	}
	at := time.Date(2026, 5, 1, 14, 0, 0, 0, time.FixedZone("CEST", 2*3600))
	for _, k := range []string{key, "telegram"} {
		_, err := st.DestinationFailing(t.Context(), "webhook", k, "cannot connect", at)
		require.NoError(t, err)
	}
	ok, err := st.DisableDestination(t.Context(), "telegram", "failing for 72h")
	require.NoError(t, err)
	require.True(t, ok)

	a, err := api.New(st, api.Config{Token: "t0k", Destinations: st})
	require.NoError(t, err)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	fromDB := map[string]string{"HERALD_DATABASE_URL": "sqlite:" + path}
	fromAPI := map[string]string{"HERALD_DATABASE_URL": "sqlite:" + t.TempDir() + "/missing/herald.db", "HERALD_API_URL": srv.URL, "HERALD_API_TOKEN": "t0k"}

	for _, env := range []map[string]string{fromDB, fromAPI} {
		out, errOut, err := cliEnv(t, env, "destinations", "list")
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 3, out)
		require.Equal(t, []string{"KEY", "CHANNEL", "STATE", "SINCE", "PENDING", "REASON"}, strings.Fields(lines[0]))
		require.Equal(t, []string{key, "webhook", "failing", "2026-05-01T12:00:00Z", "3", "cannot", "connect"}, strings.Fields(lines[1]))
		require.Equal(t, []string{"telegram", "webhook", "disabled", "2026-05-01T12:00:00Z", "0", "failing", "for", "72h"}, strings.Fields(lines[2]))
		require.Equal(t, "2 destination(s) not up\n", errOut)

		out, _, err = cliEnv(t, env, "destinations", "list", "--json")
		require.NoError(t, err)
		var got struct {
			Items []map[string]any `json:"items"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &got))
		require.Len(t, got.Items, 2)
		require.Equal(t, map[string]any{"key": key, "channel": "webhook", "state": "failing", "reason": "cannot connect",
			"since": "2026-05-01T12:00:00Z", "pending": float64(3)}, got.Items[0])

		// A page at a time, with the API's cursors, either way.
		out, errOut, err = cliEnv(t, env, "destinations", "list", "--limit", "1")
		require.NoError(t, err)
		require.Contains(t, out, key)
		require.NotContains(t, out, "telegram")
		cursor := strings.TrimSpace(errOut[strings.Index(errOut, "--cursor ")+len("--cursor "):])
		out, errOut, err = cliEnv(t, env, "destinations", "list", "--limit", "1", "--cursor", cursor)
		require.NoError(t, err)
		require.Contains(t, out, "telegram")
		require.NotContains(t, out, key)
		require.Contains(t, errOut, "no more pages")
		out, _, err = cliEnv(t, env, "destinations", "list", "--state", "disabled", "--json")
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal([]byte(out), &got))
		require.Len(t, got.Items, 1)
		require.Equal(t, "telegram", got.Items[0]["key"])
		_, _, err = cliEnv(t, env, "destinations", "list", "--state", "up")
		require.ErrorContains(t, err, "--state")
		_, _, err = cliEnv(t, env, "destinations", "list", "--state", "disabled", "--cursor", cursor)
		require.ErrorContains(t, err, "--cursor")
	}

	out, _, err := cliEnv(t, fromAPI, "destinations", "enable", key)
	require.NoError(t, err)
	require.Equal(t, "enabled "+key+": up\n", out)
	_, _, err = cliEnv(t, fromAPI, "destinations", "enable", key)
	require.ErrorIs(t, err, notify.ErrNotFound)
	out, _, err = cliEnv(t, fromDB, "destinations", "enable", "--json", "telegram")
	require.NoError(t, err)
	require.JSONEq(t, `{"key":"telegram","state":"up"}`, out)
	_, _, err = cliEnv(t, fromDB, "destinations", "enable", "telegram")
	require.ErrorIs(t, err, notify.ErrNotFound)
	_, _, err = cliEnv(t, fromDB, "destinations", "enable")
	require.Error(t, err, "a key is required")
	ds, err := st.ListDestinations(t.Context(), notify.DestinationFilter{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, ds.Items)
}
