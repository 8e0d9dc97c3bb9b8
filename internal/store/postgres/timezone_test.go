package postgres

import (
	"context"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/deliverytest"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// farZone is a time zone that is not UTC, nor a whole number of hours
// from it: the tests' databases and this process run in it, so that a
// time that leaks a zone (to_jsonb of a timestamptz, a time formatted
// without UTC) shows.
const farZone = "Asia/Kolkata"

// TestMain runs the package's tests with time.Local in farZone: pgx hands
// timestamptz values back in time.Local.
func TestMain(m *testing.M) {
	loc, err := time.LoadLocation(farZone)
	if err != nil {
		panic(err)
	}
	time.Local = loc
	os.Exit(m.Run())
}

// postgresURLIn is testenv.PostgresURL with the database's timezone set to
// zone, as ALTER DATABASE does it for an installation: every session on
// it starts in zone (the migrations included, which make the outbox's
// partitions by UTC day).
func postgresURLIn(t *testing.T, zone string) string {
	t.Helper()
	return inZone(t, testenv.PostgresURL(t), zone)
}

// inZone sets the timezone of the test database at dbURL to zone and
// returns dbURL.
func inZone(t *testing.T, dbURL, zone string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testenv.Require(t, testenv.PostgresVar))
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{strings.TrimPrefix(u.Path, "/")}.Sanitize()+" SET timezone = "+quote(zone))
	require.NoError(t, err)
	return dbURL
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// The status event path on a database whose timezone is not UTC (issue
// 33): the event's at is RFC 3339 in UTC with Z, the very string the API
// shows for sent_at, although every session on the database, this store's
// included, runs in farZone (the store sets no session zone: a PgBouncer
// in transaction mode would not keep one).
func TestStatusEventAtOutsideUTC(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := open(t, postgresURLIn(t, farZone))
	var zone string
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT current_setting('TimeZone')`).Scan(&zone))
	require.Equal(t, farZone, zone, "the store's sessions run in the database's zone")

	c, err := s.Create(ctx, notify.NewNotification{Request: notify.CreateRequest{
		UserID: "u", Channel: notify.ChannelEmail, To: "a@example.com", Subject: "s", Body: "b"}})
	require.NoError(t, err)
	var msg int64
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT id FROM outbox WHERE event_type = $1`, notify.EventRequested).Scan(&msg))
	out, err := deliverytest.Deliver(ctx, s, msg, c.Notification.ID, func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, notify.OutcomeSent, out)

	var at string
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT payload->>'at' FROM outbox WHERE event_type = $1`, notify.EventSent).Scan(&at))
	n, err := s.Get(ctx, c.Notification.ID)
	require.NoError(t, err)
	require.NotNil(t, n.SentAt)
	require.True(t, strings.HasSuffix(at, "Z"), "at %q", at)
	require.Equal(t, n.SentAt.UTC().Format(time.RFC3339Nano), at, "at is sent_at as the API shows it")
}

// statusAt writes a time as Go's RFC 3339 in UTC does, on a session in
// farZone: whole seconds, trailing zeros, a day that differs between the
// zones.
func TestStatusAtFormat(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := open(t, postgresURLIn(t, farZone))
	expr := "SELECT " + strings.ReplaceAll(statusAt, "ap.at", "$1::timestamptz")
	for _, at := range []time.Time{
		time.Date(2026, 12, 4, 19, 45, 8, 0, time.UTC),
		time.Date(2026, 12, 4, 19, 45, 0, 0, time.UTC),
		time.Date(2026, 12, 4, 19, 45, 8, 500_000_000, time.UTC),
		time.Date(2026, 12, 4, 19, 45, 8, 120_000_000, time.UTC),
		time.Date(2026, 12, 4, 19, 45, 8, 1_000, time.UTC),
		time.Date(2026, 12, 4, 19, 45, 8, 123_456_000, time.UTC),
		time.Date(2026, 12, 31, 23, 59, 59, 999_999_000, time.UTC),
		time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		var got string
		require.NoError(t, s.pool.QueryRow(ctx, expr, at).Scan(&got))
		require.Equal(t, at.Format(time.RFC3339Nano), got)
	}
}
