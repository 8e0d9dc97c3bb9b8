package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/notify"
)

const (
	// selectFallingBack reads, locked, the notifications of $1 that have
	// just been dead-lettered with a fallback hop still to make.
	selectFallingBack = `SELECT ` + notificationColumns + ` FROM notifications
WHERE id = ANY($1::bigint[]) AND status = 'failed' AND fallback <> '' AND fallback_next IS NULL
ORDER BY id FOR UPDATE`

	// linkHop records the hop made for $1.
	linkHop = `UPDATE notifications SET fallback_next = $2 WHERE id = $1 AND fallback_next IS NULL`
)

// fallBack makes, in tx, the next hop of each notification of ids that
// was dead-lettered with a fallback list (issue 35, point 5): the hop is
// created as any create (createInTx: its row, its notification.requested
// event, or suppressed when its recipient has opted out of the category
// on its channel since) and linked from the dead letter (fallback_next).
// A suppressed hop hands on to the one after it at once. A notification
// whose hop exists already (fallback_next set: a redriven hop that
// failed again) makes none: a chain's hop is made once.
func (s *Store) fallBack(ctx context.Context, tx pgx.Tx, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, selectFallingBack, ids)
	if err != nil {
		return wrap("read fallback", err)
	}
	falling, err := pgx.CollectRows(rows, collectNotification)
	if err != nil {
		return wrap("read fallback", err)
	}
	for _, n := range falling {
		for {
			nn, ok := n.NextHop()
			if !ok {
				break
			}
			c, err := createInTx(ctx, tx, nn, s.statusEvents)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, linkHop, n.ID, c.Notification.ID); err != nil {
				return wrap("link fallback hop", err)
			}
			if c.Notification.Status != notify.StatusSuppressed {
				break
			}
			n = c.Notification
		}
	}
	return nil
}
