package main

import (
	"bytes"
	"database/sql"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/deadletter"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/sqlite"
)

// cliEnv runs herald in this process with the given environment.
func cliEnv(t *testing.T, env map[string]string, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), args, func(k string) string { return env[k] }, &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

// The read and redrive commands print the same through the API (--api-url,
// the token from HERALD_API_TOKEN) as from the database.
func TestReadCommandsThroughAPI(t *testing.T) {
	t.Parallel()
	dbURL, ids := notificationsDB(t, 5)
	path := strings.TrimPrefix(dbURL, "sqlite:")
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	defer db.Close()
	const layout = "2006-01-02T15:04:05.000000Z"
	at := time.Date(2026, 5, 1, 12, 0, 0, 123456000, time.UTC)
	for i, id := range ids[:3] {
		failed := at.Add(time.Duration(i) * time.Minute).Format(layout)
		_, err = db.Exec(`UPDATE notifications SET status = 'failed', attempts = 1, last_error = ?, failed_at = ?, updated_at = ? WHERE id = ?`,
			"550 <mailbox unavailable>", failed, failed, id)
		require.NoError(t, err)
		_, err = db.Exec(`INSERT INTO delivery_attempts (notification_id, message_id, attempt, started_at, finished_at, outcome, error)
			VALUES (?, ?, 1, ?, ?, 'dead', '550 <mailbox unavailable>')`, id, 100+i, failed, failed)
		require.NoError(t, err)
	}

	st, err := sqlite.Open(t.Context(), path, sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	a, err := api.New(st, api.Config{Token: "t0k", DeadLetters: deadletter.New(st, nil)})
	require.NoError(t, err)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)

	fromDB := map[string]string{"HERALD_DATABASE_URL": dbURL}
	// The API path never opens a database: this one does not exist.
	fromAPI := map[string]string{"HERALD_DATABASE_URL": "sqlite:" + t.TempDir() + "/missing/herald.db", "HERALD_API_URL": srv.URL, "HERALD_API_TOKEN": "t0k"}
	same := func(args ...string) string {
		t.Helper()
		out, errOut, err := cliEnv(t, fromDB, args...)
		aOut, aErrOut, aErr := cliEnv(t, fromAPI, args...)
		require.Equal(t, out, aOut, "stdout of %v", args)
		require.Equal(t, errOut, aErrOut, "stderr of %v", args)
		if err != nil || aErr != nil {
			require.Error(t, aErr, "%v", args)
			require.Error(t, err, "%v", args)
			if errors.Is(err, notify.ErrNotFound) {
				// The database path's text names the store's step too.
				require.ErrorIs(t, aErr, notify.ErrNotFound, "%v", args)
			} else {
				require.Equal(t, err.Error(), aErr.Error(), "%v", args)
			}
		}
		return out
	}
	first, last := notify.FormatID(ids[0]), notify.FormatID(ids[4])

	out := same("notifications", "list", "--limit", "2")
	require.Contains(t, out, last)
	_, errOut, err := cliEnv(t, fromDB, "notifications", "list", "--limit", "2")
	require.NoError(t, err)
	cursor := strings.TrimSpace(errOut[strings.Index(errOut, "--cursor ")+len("--cursor "):])
	same("notifications", "list", "--limit", "2", "--cursor", cursor)
	same("notifications", "list", "--status", "failed", "--json")
	same("notifications", "list", "--user-id", "u-0", "--limit", "1", "--json")
	out = same("notifications", "show", first)
	require.Contains(t, out, "550 <mailbox unavailable>")
	require.Contains(t, out, "failed_at")
	same("notifications", "show", "--json", first)
	same("notifications", "show", last)
	same("notifications", "show", "999")
	same("notifications", "list", "--limit", "0")
	out = same("dlq", "list")
	require.Contains(t, out, "550 <mailbox unavailable>")
	out = same("dlq", "list", "--json")
	require.Contains(t, out, `"last_error": "550 <mailbox unavailable>"`, "no HTML escaping")
	same("dlq", "list", "--limit", "2", "--error", "MAILBOX")
	same("dlq", "list", "--limit", "0", "--since", "876000h")
	// dlq show prints the dead letter's attempts, as notifications show.
	out = same("dlq", "show", first)
	require.Contains(t, out, "ATTEMPT")
	require.Regexp(t, `(?m)^1\s+100\s.*\sdead\s+550 <mailbox unavailable>$`, out)
	_, errOut, err = cliEnv(t, fromDB, "dlq", "show", last)
	require.NoError(t, err)
	require.Contains(t, errOut, "is pending, not a dead letter")
	same("dlq", "show", last)
	same("dlq", "show", "--json", first)
	out = same("dlq", "redrive", "--id", first, "--id", last, "--id", "999", "--dry-run")
	require.Equal(t, "would redrive 1 dead letter(s): ["+first+"]; would skip 2: "+last+" (not_failed), 999 (not_found)\n", out)
	same("dlq", "redrive", "--all", "--dry-run")
	same("dlq", "redrive", "--all", "--id", first)

	// A redrive through the API: what it did, and last_error cleared.
	out, _, err = cliEnv(t, fromAPI, "dlq", "redrive", "--id", first+","+last)
	require.NoError(t, err)
	require.Equal(t, "redrove 1 of 1 dead letter(s); skipped 1: "+last+" (not_failed)\n", out)
	n, err := st.Get(t.Context(), ids[0])
	require.NoError(t, err)
	require.Equal(t, notify.StatusPending, n.Status)
	require.Empty(t, n.LastError)

	// Without the token the API refuses, and says so.
	_, _, err = cliEnv(t, map[string]string{"HERALD_API_URL": srv.URL}, "dlq", "list")
	require.ErrorContains(t, err, "401 unauthorized")
	_, _, err = cliEnv(t, map[string]string{"HERALD_API_URL": "localhost:8080"}, "notifications", "show", "1")
	require.ErrorIs(t, err, errUsage)
}

// A command sent to an API that wants a token (a 401) says which setting
// carries it (issue 38): missing, or refused.
func TestCommandThroughAPIUnauthorizedNamesToken(t *testing.T) {
	t.Parallel()
	dbURL, _ := notificationsDB(t, 1)
	st, err := sqlite.Open(t.Context(), strings.TrimPrefix(dbURL, "sqlite:"), sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	a, err := api.New(st, api.Config{Token: "t0k", DeadLetters: deadletter.New(st, nil)})
	require.NoError(t, err)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)

	for _, args := range [][]string{{"notifications", "list"}, {"notifications", "show", "1"}, {"dlq", "list"}} {
		_, _, err := cliEnv(t, map[string]string{"HERALD_API_URL": srv.URL}, args...)
		require.Error(t, err, "%v", args)
		require.ErrorContains(t, err, "401")
		require.ErrorContains(t, err, "needs a token: set HERALD_API_TOKEN (or --api-token)", "%v", args)

		_, _, err = cliEnv(t, map[string]string{"HERALD_API_URL": srv.URL, "HERALD_API_TOKEN": "wrong"}, args...)
		require.ErrorContains(t, err, "refused the token given (HERALD_API_TOKEN or --api-token)", "%v", args)
		require.NotContains(t, err.Error(), "wrong", "the token given is never shown")

		_, _, err = cliEnv(t, map[string]string{"HERALD_API_URL": srv.URL}, append([]string{"--api-token=wrong"}, args...)...)
		require.ErrorContains(t, err, "refused the token given", "%v", args)
	}
}
