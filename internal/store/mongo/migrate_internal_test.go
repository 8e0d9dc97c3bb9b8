package mongo

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/mongo/mongotest"
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
