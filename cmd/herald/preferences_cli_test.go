package main

import (
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/sqlite"
)

// herald recipients preferences shows a user's preferences through the
// API, and --set changes the ones it names and keeps the others; a
// refused change (a required category, a bad --set) changes nothing.
func TestRecipientsPreferencesCommand(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "herald.db"), sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	require.NoError(t, st.Migrate(t.Context()))
	a, err := api.New(st, api.Config{Token: "t0k", Recipients: st, Templates: st, Preferences: st,
		RequiredCategories: []string{"security"}, KnownChannels: notify.Channels{notify.ChannelEmail: notify.EmailSpec, "telegram": {}}})
	require.NoError(t, err)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	env := map[string]string{"HERALD_API_URL": srv.URL, "HERALD_API_TOKEN": "t0k"}
	prefs := func(args ...string) map[string]any {
		t.Helper()
		out, errOut, err := cliEnv(t, env, append([]string{"recipients", "preferences"}, args...)...)
		require.NoError(t, err, errOut)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &m), out)
		return m
	}
	stored := func() notify.Preferences {
		t.Helper()
		p, err := st.Preferences(t.Context(), "u-1")
		require.NoError(t, err)
		return p
	}

	got := prefs("u-1")
	require.Equal(t, "u-1", got["user_id"])
	require.Empty(t, got["categories"])
	require.Equal(t, []any{"security"}, got["required_categories"])

	got = prefs("u-1", "--set", "news.email=false", "--set", "order.shipped.telegram=false")
	require.Equal(t, map[string]any{"news": map[string]any{"email": false}, "order.shipped": map[string]any{"telegram": false}}, got["categories"],
		"a category with dots splits at the last one")
	require.Equal(t, notify.Preferences{"news": {"email": false}, "order.shipped": {"telegram": false}}, stored())

	// A one-click unsubscribe meanwhile: the next --set keeps it.
	require.NoError(t, st.SetPreference(t.Context(), "u-1", "digest", "email", false))
	prefs("u-1", "--set", "news.email=true")
	require.Equal(t, notify.Preferences{"news": {"email": true}, "digest": {"email": false}, "order.shipped": {"telegram": false}}, stored())

	before := stored()
	_, _, err = cliEnv(t, env, "recipients", "preferences", "u-1", "--set", "security.email=false", "--set", "news.email=false")
	require.Error(t, err)
	require.Contains(t, err.Error(), "required")
	require.Equal(t, before, stored(), "a refused PUT changes nothing, not even the other --set")
	for _, bad := range []string{"news=false", "news.email", "news.email=maybe", ".email=false", "news.=false"} {
		_, _, err = cliEnv(t, env, "recipients", "preferences", "u-1", "--set", bad)
		require.Error(t, err, bad)
	}
	require.Equal(t, before, stored())

	_, _, err = cliEnv(t, map[string]string{"HERALD_API_URL": srv.URL}, "recipients", "preferences", "u-1")
	require.Error(t, err, "the API wants its token")
}
