package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

const (
	// selectFallingBack reads a notification just dead-lettered with a
	// fallback hop still to make.
	selectFallingBack = `SELECT ` + notificationColumns + ` FROM notifications
WHERE id = ? AND status = 'failed' AND fallback <> '' AND fallback_next IS NULL`

	// linkHop records the hop made for a notification.
	linkHop = `UPDATE notifications SET fallback_next = ?2 WHERE id = ?1 AND fallback_next IS NULL`
)

// fallBack makes, in tx at t, the next hop of each notification of ids
// that was dead-lettered with a fallback list, as the PostgreSQL store
// does (see its fallBack): created as any create, linked from the dead
// letter, a suppressed hop handing on to the next at once, and made once
// per notification.
func (s *Store) fallBack(ctx context.Context, tx *sql.Tx, ids []int64, t time.Time) error {
	for _, id := range ids {
		n, err := scanNotification(tx.QueryRowContext(ctx, selectFallingBack, id))
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read fallback of notification %d: %w", id, classify(err))
		}
		for {
			nn, ok := n.NextHop()
			if !ok {
				break
			}
			c, err := s.createIn(ctx, tx, nn, t)
			if err != nil {
				return fmt.Errorf("create fallback hop of notification %d: %w", n.ID, err)
			}
			if _, err := tx.ExecContext(ctx, linkHop, n.ID, c.Notification.ID); err != nil {
				return fmt.Errorf("link fallback hop of notification %d: %w", n.ID, classify(err))
			}
			if c.Notification.Status != notify.StatusSuppressed {
				break
			}
			n = c.Notification
		}
	}
	return nil
}
