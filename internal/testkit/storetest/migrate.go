package storetest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/notify"
)

// OldRecipient is a recipient as the schemas before issue 37 kept it: one
// column (field) per channel's address.
type OldRecipient struct {
	UserID, Email, TelegramChatID, WebhookURL, Locale, TimeZone string
	Revision                                                    int64
}

// OldRecipients are the recipients a test of the migration to one
// addresses column writes under the old schema, before it migrates (see
// CheckMigratedRecipients).
var OldRecipients = []OldRecipient{
	{UserID: "u-all", Email: "ada@example.com", TelegramChatID: "-1001", WebhookURL: "https://hooks.example.com/a",
		Locale: "de", TimeZone: "Europe/Berlin", Revision: 3},
	{UserID: "u-mail", Email: "bob@example.com", Revision: 1},
	{UserID: "u-none", Locale: "fr", Revision: 2},
}

// CheckMigratedRecipients checks what the migration made of
// OldRecipients: each address under its channel's name, the empty ones
// left out, the locale, time zone and revision as they were (no one
// changed the recipient); and that a recipient is then written as before.
func CheckMigratedRecipients(t *testing.T, ctx context.Context, s api.Recipients) {
	t.Helper()
	want := map[string]map[string]string{
		"u-all":  {notify.ChannelEmail: "ada@example.com", "telegram": "-1001", "webhook": "https://hooks.example.com/a"},
		"u-mail": {notify.ChannelEmail: "bob@example.com"},
		"u-none": nil,
	}
	for _, old := range OldRecipients {
		r, err := s.Recipient(ctx, old.UserID)
		require.NoError(t, err, old.UserID)
		require.Equal(t, want[old.UserID], r.Addresses, old.UserID)
		require.Equal(t, old.Locale, r.Locale, old.UserID)
		require.Equal(t, old.TimeZone, r.TimeZone, old.UserID)
		require.Equal(t, old.Revision, r.Revision, "%s: no one changed the recipient", old.UserID)
	}
	put, err := s.PutRecipient(ctx, notify.Recipient{UserID: "u-all", Addresses: map[string]string{"telegram": "@ada"}})
	require.NoError(t, err)
	require.EqualValues(t, OldRecipients[0].Revision+1, put.Revision)
	r, err := s.Recipient(ctx, "u-all")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"telegram": "@ada"}, r.Addresses)
}
