package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/sqlite"
)

// cliRun runs herald in this process against the database at dbURL and
// returns stdout, stderr and the error.
func cliRun(t *testing.T, dbURL string, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	getenv := func(k string) string {
		if k == "HERALD_DATABASE_URL" {
			return dbURL
		}
		return ""
	}
	err := run(t.Context(), args, getenv, &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

// notificationsDB returns a migrated SQLite file holding n notifications
// (user_id u-0, u-1, u-0, ...), and their ids in creation order.
func notificationsDB(t *testing.T, n int) (string, []int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "herald.db")
	dbURL := "sqlite:" + path
	_, _, err := cliRun(t, dbURL, "migrate")
	require.NoError(t, err)
	st, err := sqlite.Open(t.Context(), path, sqlite.Config{})
	require.NoError(t, err)
	defer st.Close()
	var ids []int64
	for i := range n {
		c, err := st.Create(t.Context(), notify.NewNotification{Request: notify.CreateRequest{
			UserID: []string{"u-0", "u-1"}[i%2], Channel: "email", To: "a@example.com",
			Subject: "Subject " + notify.FormatID(int64(i)), Body: "Hello\nbody " + notify.FormatID(int64(i)),
		}})
		require.NoError(t, err)
		ids = append(ids, c.Notification.ID)
	}
	return dbURL, ids
}

func TestNotificationsList(t *testing.T) {
	t.Parallel()
	dbURL, ids := notificationsDB(t, 5)

	out, errOut, err := cliRun(t, dbURL, "notifications", "list", "--limit", "2")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.True(t, strings.HasPrefix(lines[0], "ID "), out)
	require.True(t, strings.HasPrefix(lines[1], notify.FormatID(ids[4])+" "), "newest first: %s", out)
	require.True(t, strings.HasPrefix(lines[2], notify.FormatID(ids[3])+" "), out)
	require.Contains(t, errOut, "next page: --cursor ")
	cursor := strings.TrimSpace(errOut[strings.Index(errOut, "--cursor ")+len("--cursor "):])

	// The cursor goes on where the page ended; flags may follow anything.
	out, errOut, err = cliRun(t, dbURL, "notifications", "list", "--cursor", cursor, "--limit=10")
	require.NoError(t, err)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out)
	require.True(t, strings.HasPrefix(lines[1], notify.FormatID(ids[2])+" "), out)
	require.Contains(t, errOut, "no more pages")

	// --json is the API's page; its cursor works with the same filters.
	out, _, err = cliRun(t, dbURL, "notifications", "list", "--user-id", "u-0", "--status", "pending", "--limit", "1", "--json")
	require.NoError(t, err)
	var page struct {
		Items []struct {
			ID   string `json:"id"`
			Body *string
		} `json:"items"`
		NextCursor string `json:"next_cursor"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &page), out)
	require.Len(t, page.Items, 1)
	require.Equal(t, notify.FormatID(ids[4]), page.Items[0].ID)
	require.Nil(t, page.Items[0].Body, "a listing leaves the body out")
	require.NotEmpty(t, page.NextCursor)
	out, _, err = cliRun(t, dbURL, "notifications", "list", "--json", "--user-id", "u-0", "--status", "pending", "--cursor", page.NextCursor)
	require.NoError(t, err)
	require.Contains(t, out, `"id": "`+notify.FormatID(ids[2])+`"`)
	require.NotContains(t, out, `"id": "`+notify.FormatID(ids[3])+`"`, "u-1's are filtered out")

	// Bad flags are usage errors naming the flag.
	for _, tc := range []struct{ args []string }{
		{[]string{"--limit", "0"}},
		{[]string{"--limit", "501"}},
		{[]string{"--status", "lost"}},
		{[]string{"--created-after", "yesterday"}},
		{[]string{"--cursor", "nope"}},
		{[]string{"--user-id", "u-1", "--cursor", page.NextCursor}},
	} {
		_, _, err := cliRun(t, dbURL, append([]string{"notifications", "list"}, tc.args...)...)
		require.ErrorIs(t, err, errUsage, "%v", tc.args)
		require.Contains(t, err.Error(), tc.args[len(tc.args)-2], "%v names its flag", tc.args)
	}
}

func TestNotificationsShow(t *testing.T) {
	t.Parallel()
	dbURL, ids := notificationsDB(t, 2)
	// Attempts as the worker writes them.
	db, err := sql.Open("sqlite", strings.TrimPrefix(dbURL, "sqlite:")+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	defer db.Close()
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	const layout = "2006-01-02T15:04:05.000000Z"
	_, err = db.Exec(`INSERT INTO delivery_attempts (notification_id, message_id, attempt, started_at, finished_at, outcome, error)
		VALUES (?, 1, 1, ?, ?, 'retry', '451 try later'), (?, 3, 2, ?, NULL, NULL, NULL)`,
		ids[0], at.Format(layout), at.Add(time.Second).Format(layout), ids[0], at.Add(time.Minute).Format(layout))
	require.NoError(t, err)

	out, _, err := cliRun(t, dbURL, "notifications", "show", notify.FormatID(ids[0]))
	require.NoError(t, err)
	require.Contains(t, out, "Subject 0")
	require.Contains(t, out, "body:\nHello\nbody 0\n")
	require.Regexp(t, `(?m)^1\s+1\s+2026-05-01T12:00:00Z\s+2026-05-01T12:00:01Z\s+retry\s+451 try later$`, out)
	require.Regexp(t, `(?m)^2\s+3\s+2026-05-01T12:01:00Z\s+-\s+in flight\s*$`, out)

	out, _, err = cliRun(t, dbURL, "notifications", "show", "--json", notify.FormatID(ids[0]))
	require.NoError(t, err)
	var shown struct {
		Notification map[string]any   `json:"notification"`
		Attempts     []map[string]any `json:"attempts"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &shown), out)
	require.Equal(t, "Hello\nbody 0", shown.Notification["body"])
	require.Len(t, shown.Attempts, 2)
	require.Equal(t, "retry", shown.Attempts[0]["outcome"])
	require.Nil(t, shown.Attempts[1]["outcome"])

	out, _, err = cliRun(t, dbURL, "notifications", "show", notify.FormatID(ids[1]))
	require.NoError(t, err)
	require.Contains(t, out, "no delivery attempt yet")

	_, _, err = cliRun(t, dbURL, "notifications", "show", "999")
	require.ErrorIs(t, err, notify.ErrNotFound)
	_, _, err = cliRun(t, dbURL, "notifications", "show", "abc")
	require.ErrorIs(t, err, errUsage)
	_, _, err = cliRun(t, dbURL, "notifications", "show")
	require.ErrorIs(t, err, errUsage)

	// Help is on stdout and is no error; an unknown subcommand is a usage
	// error.
	out, _, err = cliRun(t, dbURL, "notifications", "show", "--help")
	require.True(t, err == nil || errors.Is(err, errHelp), "%v", err)
	require.Contains(t, out, "Usage: herald notifications show")
	_, _, err = cliRun(t, dbURL, "notifications", "delete")
	require.ErrorIs(t, err, errUsage)
}

// herald dlq redrive names why each id it was given was not redriven, as
// the API does, and refuses --all with --id.
func TestDLQRedriveExplainsSkips(t *testing.T) {
	t.Parallel()
	dbURL, ids := notificationsDB(t, 2)
	db, err := sql.Open("sqlite", strings.TrimPrefix(dbURL, "sqlite:")+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(`UPDATE notifications SET status = 'failed', attempts = 1, last_error = '550 no',
		failed_at = updated_at WHERE id = ?`, ids[0])
	require.NoError(t, err)

	a, b := notify.FormatID(ids[0]), notify.FormatID(ids[1])
	out, _, err := cliRun(t, dbURL, "dlq", "redrive", "--id", a, "--id", b, "--id", "999", "--dry-run")
	require.NoError(t, err)
	require.Equal(t, "would redrive 1 dead letter(s): ["+a+"]; would skip 2: "+b+" (not_failed), 999 (not_found)\n", out)
	out, _, err = cliRun(t, dbURL, "dlq", "redrive", "--id", a+","+b)
	require.NoError(t, err)
	require.Equal(t, "redrove 1 of 1 dead letter(s); skipped 1: "+b+" (not_failed)\n", out)
	_, _, err = cliRun(t, dbURL, "dlq", "redrive", "--all", "--id", a)
	require.ErrorIs(t, err, errUsage)
}

// Issue 17 point 5: show prints what the notification's channel has: a
// subject for email (and what its to is), none for a channel without one;
// list names each row's channel and filters by a known one.
func TestNotificationsShowByChannel(t *testing.T) {
	t.Parallel()
	dbURL, ids := notificationsDB(t, 1)
	st, err := sqlite.Open(t.Context(), strings.TrimPrefix(dbURL, "sqlite:"), sqlite.Config{})
	require.NoError(t, err)
	c, err := st.Create(t.Context(), notify.NewNotification{Request: notify.CreateRequest{
		UserID: "u-9", Channel: "webhook", To: "https://hooks.example.com/in", Body: `{"event":"paid"}`,
	}})
	require.NoError(t, err)
	require.NoError(t, st.Close())

	out, _, err := cliRun(t, dbURL, "notifications", "show", notify.FormatID(ids[0]))
	require.NoError(t, err)
	require.Regexp(t, `(?m)^to\s+a@example.com  \(an email address\)$`, out)
	require.Regexp(t, `(?m)^subject\s+Subject 0$`, out)

	out, _, err = cliRun(t, dbURL, "notifications", "show", notify.FormatID(c.Notification.ID))
	require.NoError(t, err)
	require.Regexp(t, `(?m)^channel\s+webhook$`, out)
	require.Regexp(t, `(?m)^to\s+https://hooks.example.com/in  \(an http\(s\) URL\)$`, out)
	require.NotRegexp(t, `(?m)^subject`, out, "no subject line for a channel without one")
	require.Contains(t, out, "body:\n{\"event\":\"paid\"}\n")

	out, _, err = cliRun(t, dbURL, "notifications", "list")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^ID\s+CREATED_AT\s+STATUS\s+ATTEMPTS\s+USER_ID\s+CHANNEL\s+TO\s+SUBJECT$`, out)
	require.Regexp(t, `(?m)\s+u-9\s+webhook\s+https://hooks.example.com/in\s+-$`, out)
	out, _, err = cliRun(t, dbURL, "notifications", "list", "--channel", "email")
	require.NoError(t, err)
	require.Contains(t, out, "a@example.com")
	require.NotContains(t, out, "hooks.example.com")
	out, _, err = cliRun(t, dbURL, "notifications", "list", "--channel", "webhook")
	require.NoError(t, err, "a registered channel is a filter though no setting enables it here")
	require.Contains(t, out, "hooks.example.com")
	require.NotContains(t, out, "a@example.com")
	_, _, err = cliRun(t, dbURL, "notifications", "list", "--channel", "pigeon")
	require.ErrorIs(t, err, errUsage)
	require.ErrorContains(t, err, "--channel: channel must be one of email")
}
