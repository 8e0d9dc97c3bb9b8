package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/storetest"
)

// Migration 0025 on a database at 0024: each recipient's three address
// columns move into addresses, keyed by channel (see
// storetest.CheckMigratedRecipients), and the columns go.
func TestMigrateRecipientAddresses(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s := openMigratedBefore(ctx, t, 25)
	for _, r := range storetest.OldRecipients {
		_, err := s.pool.Exec(ctx, `INSERT INTO recipients (user_id, email, telegram_chat_id, webhook_url, locale, time_zone, revision)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, r.UserID, r.Email, r.TelegramChatID, r.WebhookURL, r.Locale, r.TimeZone, r.Revision)
		require.NoError(t, err)
	}

	require.NoError(t, s.Migrate(ctx))
	require.Zero(t, count(t, s, `SELECT count(*) FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'recipients' AND column_name IN ('email', 'telegram_chat_id', 'webhook_url')`))
	storetest.CheckMigratedRecipients(t, ctx, s)
}
