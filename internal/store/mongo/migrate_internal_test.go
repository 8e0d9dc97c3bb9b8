package mongo

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/mongotest"
	"github.com/heraldhq/herald/internal/testkit/storetest"
)

// Migration 3 on a database at version 2: the global unique index on
// idempotency_key goes, the notifications that hold a key get their
// idem_scope, and keys are per user from then on.
func TestMigrateIdempotencyScopeBackfill(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := Open(ctx, mongotest.URL(t), Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.Equal(t, "idempotency_scope", migrations[2].name)
	require.NoError(t, s.migrate(ctx, migrations[:2]))

	// A notification as the build before wrote it: its key, no scope.
	req := notify.CreateRequest{UserID: "u1", Channel: notify.ChannelEmail, To: "a@example.com", Subject: "s", Body: "b"}
	c, err := s.Create(ctx, notify.NewNotification{Request: req, IdempotencyKey: "k"})
	require.NoError(t, err)
	_, err = s.n.UpdateOne(ctx, bson.D{{Key: "_id", Value: key(c.Notification.ID)}},
		bson.D{{Key: "$unset", Value: bson.D{{Key: "idem_scope", Value: ""}}}})
	require.NoError(t, err)

	require.NoError(t, s.Migrate(ctx))
	d, ok, err := s.load(ctx, c.Notification.ID)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, idemScope("u1", "k"), d.IdemScope, "backfilled")
	require.Equal(t, "k", d.IdempotencyKey)

	again, err := s.Create(ctx, notify.NewNotification{Request: req, IdempotencyKey: "k"})
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, c.Notification.ID, again.Notification.ID)
	other := req
	other.UserID = "u2"
	fresh, err := s.Create(ctx, notify.NewNotification{Request: other, IdempotencyKey: "k"})
	require.NoError(t, err, "the global index is gone")
	require.False(t, fresh.Replayed)

	// Migrating again changes nothing.
	require.NoError(t, s.Migrate(ctx))
}

// Migration 8 (issue 34, priority) on a database at version 7: an open
// document gets the normal rank; and one an older process writes after
// the migration, without a rank, is still claimed (as normal), as are the
// ranked ones, high first.
func TestMigrateRankBackfill(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := Open(ctx, mongotest.URL(t), Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.Equal(t, "due_rank_idx", migrations[7].name)
	require.NoError(t, s.migrate(ctx, migrations[:7]))

	req := notify.CreateRequest{UserID: "u1", Channel: notify.ChannelEmail, To: "a@example.com", Subject: "s", Body: "b"}
	unranked := func() int64 {
		c, err := s.Create(ctx, notify.NewNotification{Request: req})
		require.NoError(t, err)
		_, err = s.n.UpdateOne(ctx, bson.D{{Key: "_id", Value: key(c.Notification.ID)}},
			bson.D{{Key: "$unset", Value: bson.D{{Key: "rank", Value: ""}}}})
		require.NoError(t, err)
		return c.Notification.ID
	}
	before := unranked()
	require.NoError(t, s.Migrate(ctx))
	d, ok, err := s.load(ctx, before)
	require.NoError(t, err)
	require.True(t, ok)
	require.NotNil(t, d.Rank, "backfilled")
	require.Equal(t, notify.RankNormal, *d.Rank)

	after := unranked() // an older process's write
	high := req
	high.Priority = notify.PriorityHigh
	h, err := s.Create(ctx, notify.NewNotification{Request: high})
	require.NoError(t, err)
	ms, err := s.Claim(ctx, "w", 10, time.Minute)
	require.NoError(t, err)
	var got []int64
	for _, m := range ms {
		got = append(got, m.ID/eventSpan)
	}
	require.Equal(t, []int64{h.Notification.ID, before, after}, got)
}

// Migration 12 on a database at version 11: each recipient's three old
// address fields move into its addresses sub-document, keyed by channel
// (see storetest.CheckMigratedRecipients), and are unset; running it again
// changes nothing.
func TestMigrateRecipientAddressesBackfill(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := Open(ctx, mongotest.URL(t), Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.Equal(t, "recipient_addresses", migrations[11].name)
	require.NoError(t, s.migrate(ctx, migrations[:11]))
	for _, r := range storetest.OldRecipients {
		_, err := s.db.Collection(collRecipients).InsertOne(ctx, bson.D{{Key: "_id", Value: r.UserID}, {Key: "email", Value: r.Email},
			{Key: "telegram_chat_id", Value: r.TelegramChatID}, {Key: "webhook_url", Value: r.WebhookURL}, {Key: "locale", Value: r.Locale},
			{Key: "time_zone", Value: r.TimeZone}, {Key: "updated_at", Value: now()}, {Key: "revision", Value: r.Revision}})
		require.NoError(t, err)
	}

	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, backfillAddresses(ctx, s.db), "a second run finds nothing to move")
	n, err := s.db.Collection(collRecipients).CountDocuments(ctx, bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "email", Value: bson.D{{Key: "$exists", Value: true}}}},
		bson.D{{Key: "telegram_chat_id", Value: bson.D{{Key: "$exists", Value: true}}}},
		bson.D{{Key: "webhook_url", Value: bson.D{{Key: "$exists", Value: true}}}},
	}}})
	require.NoError(t, err)
	require.Zero(t, n, "the old fields are unset")
	storetest.CheckMigratedRecipients(t, ctx, s)
}
