package sqlite_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/sqlite"
)

// Migration 0011 rebuilds notifications (SQLite cannot drop a UNIQUE
// constraint): on a database at 0009, every row keeps its columns and key,
// ids go on from the old counter, and keys become per user.
func TestUpgradeToScopedIdempotencyKeys(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "herald.db")
	db := raw(t, path)
	_, err := db.Exec(`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL) STRICT`)
	require.NoError(t, err)
	files, err := filepath.Glob(filepath.Join("migrations", "000*.sql"))
	require.NoError(t, err)
	require.Len(t, files, 9, "the migrations before 0011")
	for i, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		_, err = db.Exec(string(b))
		require.NoError(t, err, f)
		_, err = db.Exec(`INSERT INTO schema_migrations VALUES (?, ?, ?)`, i+1, "m", "2026-01-01T00:00:00.000000Z")
		require.NoError(t, err)
	}
	now := time.Now().UTC().Format(timeLayout)
	_, err = db.Exec(`INSERT INTO notifications (id, user_id, channel, recipient, subject, body, status, attempts, last_error,
		idempotency_key, created_at, updated_at, sent_at, claim_attempt_id, claimed_until, retry_due_at)
		VALUES (7, 'u1', 'email', 'a@example.com', 'Hello 1', 'Body line one', 'sent', 2, 'old error', 'k', ?, ?, ?, 3, ?, ?)`,
		now, now, now, now, now)
	require.NoError(t, err)
	_, err = db.Exec(`UPDATE sqlite_sequence SET seq = 1000 WHERE name = 'notifications'`)
	require.NoError(t, err)

	s := open(t, path, sqlite.Config{})
	require.NoError(t, s.Migrate(t.Context()))

	old, err := s.Get(t.Context(), 7)
	require.NoError(t, err)
	require.Equal(t, notify.StatusSent, old.Status)
	require.Equal(t, 2, old.Attempts)
	require.Equal(t, "old error", old.LastError)
	require.Equal(t, "k", old.IdempotencyKey)
	var claim int64
	var until, due string
	require.NoError(t, db.QueryRow(`SELECT claim_attempt_id, claimed_until, retry_due_at FROM notifications WHERE id = 7`).Scan(&claim, &until, &due))
	require.Equal(t, int64(3), claim)
	require.Equal(t, now, until)
	require.Equal(t, now, due)

	// The old key still answers its user; another user's is another key,
	// and its id follows the old counter.
	req := notify.CreateRequest{UserID: "u1", Channel: notify.ChannelEmail, To: "a@example.com", Subject: "Hello 1", Body: "Body line one"}
	c, err := s.Create(t.Context(), notify.NewNotification{Request: req, IdempotencyKey: "k"})
	require.NoError(t, err)
	require.True(t, c.Replayed)
	require.Equal(t, int64(7), c.Notification.ID)
	req.UserID = "u2"
	c, err = s.Create(t.Context(), notify.NewNotification{Request: req, IdempotencyKey: "k"})
	require.NoError(t, err)
	require.False(t, c.Replayed)
	require.Greater(t, c.Notification.ID, int64(1000), "ids go on past the old counter")

	var indexes int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'notifications' AND name LIKE 'notifications_%'`).Scan(&indexes))
	require.Equal(t, 8, indexes, "every index of notifications is back, the new one, and the later migrations' (0014's destination index)")
}
