package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// Migration 0011 on a database with keyed notifications: the global
// unique constraint goes, the rows keep their keys, and keys are per user
// from then on.
func TestMigrateIdempotencyScope(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s := openMigratedBefore(ctx, t, 11)
	var nid int64
	require.NoError(t, s.pool.QueryRow(ctx, `INSERT INTO notifications (user_id, channel, recipient, subject, body, idempotency_key)
		VALUES ('u1', 'email', 'a@example.com', 's', 'b', 'k') RETURNING id`).Scan(&nid))

	require.NoError(t, s.Migrate(ctx))
	req := notify.CreateRequest{UserID: "u1", Channel: notify.ChannelEmail, To: "a@example.com", Subject: "s", Body: "b"}
	again, err := s.Create(ctx, notify.NewNotification{Request: req, IdempotencyKey: "k"})
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, nid, again.Notification.ID)
	req.UserID = "u2"
	other, err := s.Create(ctx, notify.NewNotification{Request: req, IdempotencyKey: "k"})
	require.NoError(t, err, "the global constraint is gone")
	require.False(t, other.Replayed)
	require.Zero(t, count(t, s, `SELECT count(*) FROM pg_constraint WHERE conname = 'notifications_idempotency_key_key'`))
}
