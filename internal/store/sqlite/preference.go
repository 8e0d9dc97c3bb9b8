package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/sqlrows"
)

const (
	selectPreferences = `SELECT category, channel, allowed FROM preferences WHERE user_id = ? ORDER BY category, channel`
	deletePreferences = `DELETE FROM preferences WHERE user_id = ?`
	upsertPreference  = `
INSERT INTO preferences (user_id, category, channel, allowed, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (user_id, category, channel) DO UPDATE SET allowed = excluded.allowed, updated_at = excluded.updated_at`
	// selectOptedOut is the create's look-up (createIn): whether the user
	// opted out of the category on the channel.
	selectOptedOut = `SELECT EXISTS (SELECT 1 FROM preferences WHERE user_id = ? AND category = ? AND channel = ? AND allowed = 0)`
)

// Preferences returns the preferences of userID; none is an empty set,
// not an error.
func (s *Store) Preferences(ctx context.Context, userID string) (notify.Preferences, error) {
	rows, err := s.read.QueryContext(ctx, selectPreferences, userID)
	if err != nil {
		return nil, fmt.Errorf("get preferences: %w", classify(err))
	}
	defer rows.Close()
	p, err := sqlrows.Preferences(rows)
	if err != nil {
		return nil, fmt.Errorf("get preferences: %w", classify(err))
	}
	return p, nil
}

// PutPreferences replaces every preference of userID with p, in one
// transaction.
func (s *Store) PutPreferences(ctx context.Context, userID string, p notify.Preferences) error {
	t := formatTime(now())
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, deletePreferences, userID); err != nil {
			return err
		}
		for cat, chs := range p {
			for ch, allowed := range chs {
				if _, err := tx.ExecContext(ctx, upsertPreference, userID, cat, ch, allowed, t); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("put preferences: %w", classify(err))
	}
	return nil
}

// SetPreference records one preference of userID (a preference link's
// opt-out), leaving the others as they are.
func (s *Store) SetPreference(ctx context.Context, userID, category, channel string, allowed bool) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, upsertPreference, userID, category, channel, allowed, formatTime(now()))
		return err
	})
	if err != nil {
		return fmt.Errorf("set preference: %w", classify(err))
	}
	return nil
}
