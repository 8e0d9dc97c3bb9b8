package sqlite

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/store/migrate"
	"github.com/heraldhq/herald/internal/testkit/storetest"
)

// Migration 0023 on a database at 0022: each recipient's three address
// columns move into addresses, keyed by channel (see
// storetest.CheckMigratedRecipients), and the columns go.
func TestMigrateRecipientAddresses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openTemp(t)
	ms, err := migrate.Load(migrationFS, "migrations")
	require.NoError(t, err)
	require.Equal(t, "recipient_addresses", ms[22].Name)
	require.NoError(t, migrate.Run(ctx, migrator{s}, ms[:22]))
	for _, r := range storetest.OldRecipients {
		_, err := s.write.ExecContext(ctx, `INSERT INTO recipients (user_id, email, telegram_chat_id, webhook_url, locale, time_zone, revision, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, r.UserID, r.Email, r.TelegramChatID, r.WebhookURL, r.Locale, r.TimeZone, r.Revision, formatTime(now()))
		require.NoError(t, err)
	}

	require.NoError(t, s.Migrate(ctx))
	var old int
	require.NoError(t, s.write.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('recipients')
		WHERE name IN ('email', 'telegram_chat_id', 'webhook_url')`).Scan(&old))
	require.Zero(t, old)
	storetest.CheckMigratedRecipients(t, ctx, s)
}
