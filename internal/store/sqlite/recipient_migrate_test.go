package sqlite

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/migrate"
)

// Migration 0023 on a database at 0022: each recipient's three address
// columns move into addresses, keyed by channel, the empty ones left out;
// the revision stays, the columns go, and the recipient is written as
// before.
func TestMigrateRecipientAddresses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openTemp(t)
	ms, err := migrate.Load(migrationFS, "migrations")
	require.NoError(t, err)
	require.Equal(t, "recipient_addresses", ms[22].Name)
	require.NoError(t, migrate.Run(ctx, migrator{s}, ms[:22]))
	at := formatTime(now())
	_, err = s.write.ExecContext(ctx, `INSERT INTO recipients (user_id, email, telegram_chat_id, webhook_url, locale, time_zone, revision, updated_at) VALUES
		('u-all', 'ada@example.com', '-1001', 'https://hooks.example.com/a', 'de', 'Europe/Berlin', 3, ?1),
		('u-mail', 'bob@example.com', '', '', '', '', 1, ?1),
		('u-none', '', '', '', 'fr', '', 2, ?1)`, at)
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
	var old int
	require.NoError(t, s.write.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('recipients')
		WHERE name IN ('email', 'telegram_chat_id', 'webhook_url')`).Scan(&old))
	require.Zero(t, old)

	put, err := s.PutRecipient(ctx, notify.Recipient{UserID: "u-all", Addresses: map[string]string{"telegram": "@ada"}})
	require.NoError(t, err)
	require.EqualValues(t, 4, put.Revision)
}
