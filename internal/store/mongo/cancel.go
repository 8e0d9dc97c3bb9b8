package mongo

import (
	"context"
	"fmt"

	"github.com/heraldhq/herald/internal/notify"
)

// Cancel cancels a pending or scheduled notification that no send holds,
// with its notification.canceled status event, in one change of its
// document (a compare-and-set on its revision): a worker's claim, also a
// change of the document, comes either before (it holds a live claim, and
// the cancel changes nothing) or after (it finds the notification
// canceled: duplicate, never sent). The document's open
// notification.requested events are settled with it, so a scheduled one's
// event never reaches a worker or a broker. See api.Notifications.
func (s *Store) Cancel(ctx context.Context, id int64) (notify.Notification, error) {
	var (
		n       notify.Notification
		changed bool
	)
	found, _, err := s.change(ctx, id, func(d *doc) error {
		changed = false
		t := now()
		if d.Status != string(notify.StatusPending) || (d.Claim != nil && d.Claim.Until.After(t)) {
			n = d.notification()
			return errNoChange
		}
		d.Status, d.CanceledAt, d.UpdatedAt, d.Claim = string(notify.StatusCanceled), &t, t, nil
		for i := range d.Events {
			e := &d.Events[i]
			if e.Type == notify.EventRequested && e.ProcessedAt == nil {
				e.ProcessedAt, e.LockedUntil = &t, nil
			}
		}
		if s.statusEvents {
			if err := d.addStatusEvent(t); err != nil {
				return err
			}
		}
		n, changed = d.notification(), true
		return nil
	})
	if err != nil {
		return notify.Notification{}, fmt.Errorf("cancel notification %d: %w", id, err)
	}
	if !found {
		return notify.Notification{}, fmt.Errorf("cancel notification %d: %w", id, notify.ErrNotFound)
	}
	if changed {
		s.hub.Wake()
		return n, nil
	}
	return notify.CancelAnswer(n)
}
