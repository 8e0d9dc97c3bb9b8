package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// Migration 0025 on a database at 0024: each recipient's three address
// columns move into addresses, keyed by channel, the empty ones left out;
// the revision stays, the columns go, and the recipient is written as
// before.
func TestMigrateRecipientAddresses(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s := openMigratedBefore(ctx, t, 25)
	_, err := s.pool.Exec(ctx, `INSERT INTO recipients (user_id, email, telegram_chat_id, webhook_url, locale, time_zone, revision) VALUES
		('u-all', 'ada@example.com', '-1001', 'https://hooks.example.com/a', 'de', 'Europe/Berlin', 3),
		('u-mail', 'bob@example.com', '', '', '', '', 1),
		('u-none', '', '', '', 'fr', '', 2)`)
	require.NoError(t, err)

	require.NoError(t, s.Migrate(ctx))
	for user, want := range map[string]map[string]string{
		"u-all":  {notify.ChannelEmail: "ada@example.com", "telegram": "-1001", "webhook": "https://hooks.example.com/a"},
		"u-mail": {notify.ChannelEmail: "bob@example.com"},
		"u-none": nil,
	} {
		r, err := s.Recipient(ctx, user)
		require.NoError(t, err, user)
		require.Equal(t, want, r.Addresses, user)
	}
	r, err := s.Recipient(ctx, "u-all")
	require.NoError(t, err)
	require.Equal(t, "de", r.Locale)
	require.Equal(t, "Europe/Berlin", r.TimeZone)
	require.EqualValues(t, 3, r.Revision, "no one changed the recipient")
	require.Zero(t, count(t, s, `SELECT count(*) FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'recipients' AND column_name IN ('email', 'telegram_chat_id', 'webhook_url')`))

	put, err := s.PutRecipient(ctx, notify.Recipient{UserID: "u-all", Addresses: map[string]string{"telegram": "@ada"}})
	require.NoError(t, err)
	require.EqualValues(t, 4, put.Revision)
}
