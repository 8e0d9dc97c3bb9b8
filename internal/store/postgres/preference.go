package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/sqlrows"
)

const (
	selectPreferences = `SELECT category, channel, allowed FROM preferences WHERE user_id = $1 ORDER BY category, channel`
	deletePreferences = `DELETE FROM preferences WHERE user_id = $1`
	upsertPreference  = `
INSERT INTO preferences (user_id, category, channel, allowed) VALUES ($1, $2, $3, $4)
ON CONFLICT (user_id, category, channel) DO UPDATE SET allowed = excluded.allowed, updated_at = now()`
	// selectOptedOut is the create's look-up (CreateInTx): whether the
	// user opted out of the category on the channel.
	selectOptedOut = `SELECT EXISTS (SELECT 1 FROM preferences WHERE user_id = $1 AND category = $2 AND channel = $3 AND NOT allowed)`
)

// Preferences returns the preferences of userID; none is an empty set,
// not an error.
func (s *Store) Preferences(ctx context.Context, userID string) (notify.Preferences, error) {
	rows, err := s.pool.Query(ctx, selectPreferences, userID)
	if err != nil {
		return nil, wrap("get preferences", err)
	}
	defer rows.Close()
	p, err := sqlrows.Preferences(rows)
	if err != nil {
		return nil, wrap("get preferences", err)
	}
	return p, nil
}

// PutPreferences replaces every preference of userID with p, in one
// transaction.
func (s *Store) PutPreferences(ctx context.Context, userID string, p notify.Preferences) error {
	tx, err := s.begin(ctx)
	if err != nil {
		return wrap("put preferences: begin", err)
	}
	defer rollback(tx)
	b := &pgx.Batch{}
	b.Queue(deletePreferences, userID)
	for cat, chs := range p {
		for ch, allowed := range chs {
			b.Queue(upsertPreference, userID, cat, ch, allowed)
		}
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return wrap("put preferences", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return wrap("put preferences: commit", err)
	}
	return nil
}

// SetPreference records one preference of userID (a preference link's
// opt-out), leaving the others as they are.
func (s *Store) SetPreference(ctx context.Context, userID, category, channel string, allowed bool) error {
	if _, err := s.pool.Exec(ctx, upsertPreference, userID, category, channel, allowed); err != nil {
		return fmt.Errorf("set preference: %w", wrap("upsert", err))
	}
	return nil
}
