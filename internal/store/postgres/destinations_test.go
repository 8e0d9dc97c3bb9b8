package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Migration 0016 gives the pending email and telegram notifications made
// before it their destination (the channel's name), so that the listing
// counts them; a pending webhook keeps none, a settled one is left alone.
func TestDestinationsMigrationBackfill(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := openMigratedBefore(ctx, t, 16)
	_, err := s.pool.Exec(ctx, `INSERT INTO notifications (user_id, channel, recipient, subject, body, status) VALUES
		('u', 'email', 'a@example.com', 's', 'b', 'pending'),
		('u', 'email', 'b@example.com', 's', 'b', 'sent'),
		('u', 'telegram', '@news', '', 'b', 'pending'),
		('u', 'webhook', 'https://hooks.example.com/x', '', '{}', 'pending')`)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))

	rows, err := s.pool.Query(ctx, `SELECT channel || ':' || status || ':' || COALESCE(destination, '-') FROM notifications ORDER BY id`)
	require.NoError(t, err)
	var got []string
	for rows.Next() {
		var v string
		require.NoError(t, rows.Scan(&v))
		got = append(got, v)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"email:pending:email", "email:sent:-", "telegram:pending:telegram", "webhook:pending:-"}, got)

	_, err = s.DestinationFailing(ctx, "email", "email", "refused", time.Now())
	require.NoError(t, err)
	ds, err := s.ListDestinations(ctx)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.EqualValues(t, 1, ds[0].Pending)
}
