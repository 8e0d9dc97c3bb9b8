package mongo

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/heraldhq/herald/internal/notify"
)

// DeadLetters returns the failed notifications that match f, newest failure
// first (failed_at, then id, descending), from index failed_idx.
// ErrorContains ignores case (Unicode simple folding).
func (s *Store) DeadLetters(ctx context.Context, f notify.DeadLetterFilter) ([]notify.Notification, error) {
	if f.Limit < 0 {
		return nil, fmt.Errorf("list dead letters: limit must not be negative, got %d", f.Limit)
	}
	filter := bson.D{{Key: "status", Value: string(notify.StatusFailed)}}
	if len(f.IDs) > 0 {
		filter = append(filter, bson.E{Key: "_id", Value: bson.D{{Key: "$in", Value: keys(f.IDs)}}})
	}
	if !f.Since.IsZero() {
		filter = append(filter, bson.E{Key: "failed_at", Value: bson.D{{Key: "$gte", Value: msTime(f.Since)}}})
	}
	if f.After != nil {
		at := msTime(f.After.FailedAt)
		filter = append(filter, bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: "failed_at", Value: bson.D{{Key: "$lt", Value: at}}}},
			bson.D{{Key: "failed_at", Value: at}, {Key: "_id", Value: bson.D{{Key: "$lt", Value: key(f.After.ID)}}}},
		}})
	}
	cur, err := s.n.Find(ctx, filter, options.Find().
		SetSort(bson.D{{Key: "failed_at", Value: -1}, {Key: "_id", Value: -1}}).SetProjection(noHeavy))
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", classify(err))
	}
	defer cur.Close(ctx)
	var out []notify.Notification
	needle := strings.ToLower(f.ErrorContains)
	for cur.Next(ctx) {
		var d doc
		if err := cur.Decode(&d); err != nil {
			return nil, fmt.Errorf("list dead letters: %w", err)
		}
		if needle != "" && !strings.Contains(strings.ToLower(d.LastError), needle) {
			continue
		}
		out = append(out, d.notification())
		if f.Limit > 0 && len(out) == f.Limit {
			break
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("list dead letters: %w", classify(err))
	}
	return out, nil
}

// Redrive puts a dead-lettered notification back to pending with a fresh
// notification.requested event, in one change of its document; last_error is
// cleared (it describes the current state; the history is in the attempts).
// It reports
// false, writing nothing, for a notification that is not failed; a missing
// one is notify.ErrNotFound.
func (s *Store) Redrive(ctx context.Context, id int64) (bool, error) {
	found, written, err := s.change(ctx, id, func(d *doc) error {
		if d.Status != string(notify.StatusFailed) {
			return errNoChange
		}
		t := now()
		d.Status, d.FailedAt, d.LastError, d.UpdatedAt = string(notify.StatusPending), nil, "", t
		return d.addEvent(d.notification(), t, "")
	})
	switch {
	case err != nil:
		return false, fmt.Errorf("redrive notification %d: %w", id, err)
	case !found:
		return false, fmt.Errorf("redrive notification %d: %w", id, notify.ErrNotFound)
	}
	if written {
		s.hub.Wake()
	}
	return written, nil
}

// Reconcile gives stale pending notifications (no open event, not claimed,
// no retry due, untouched for after) a fresh event. See reconcile.Reannouncer.
// The cut-off is this process's clock.
func (s *Store) Reconcile(ctx context.Context, after time.Duration, limit int) ([]int64, error) {
	// One cut-off for the whole call, taken first: taken after the hops
	// below, it would move later by the time they took, and a failing
	// destination's record written just after the caller's cut-off would
	// look older than it.
	at := now()
	cut := at.Add(-after)
	// First the fallback hops a stopped worker left due (see makeHops).
	if err := s.resumeFallbacks(ctx, cut, limit); err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	// Only open notification.requested events count: a status event left
	// from a settling before a redrive carries no delivery.
	stale := func(d *doc, t time.Time) bool {
		return d.Status == string(notify.StatusPending) && d.UpdatedAt.Before(cut) && d.Open == d.OpenStatus &&
			(d.RetryDueAt == nil || d.RetryDueAt.Before(cut)) && (d.Claim == nil || d.Claim.Until.Before(t))
	}
	// open = open_status is not a filter an index serves: the candidates
	// are those with no open event (stale_idx) and those with an open
	// status event (open_status_idx, sparse: a few), checked in stale.
	cands, err := findAll[doc](ctx, s.n, bson.D{
		{Key: "status", Value: string(notify.StatusPending)},
		{Key: "$or", Value: bson.A{
			bson.D{{Key: "open", Value: 0}},
			bson.D{{Key: "open_status", Value: bson.D{{Key: "$gt", Value: 0}}}},
		}},
		{Key: "updated_at", Value: bson.D{{Key: "$lt", Value: cut}}},
	}, options.Find().SetSort(bson.D{{Key: "updated_at", Value: 1}, {Key: "_id", Value: 1}}).
		SetProjection(bson.D{{Key: "events", Value: 0}, {Key: "processed", Value: 0}, {Key: "history", Value: 0}}))
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	// A disabled destination's notifications are left alone, and a
	// failing one's while its record was written since the cut-off (see
	// the PostgreSQL store): their events are parked, not lost.
	held, err := s.destinations(ctx, bson.D{}, 0)
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	parked := make(map[string]bool, len(held))
	for _, d := range held {
		parked[d.Key] = d.State == notify.DestinationDisabled || !d.UpdatedAt.Before(cut)
	}
	var ids []int64
	for _, c := range cands {
		if len(ids) >= limit {
			break
		}
		if !stale(&c, at) || (c.Destination != "" && parked[c.Destination]) {
			continue
		}
		_, written, err := s.change(ctx, c.ID, func(d *doc) error {
			t := now()
			if !stale(d, t) {
				return errNoChange
			}
			d.UpdatedAt, d.RetryDueAt = t, nil
			return d.addEvent(d.notification(), t, "")
		})
		if err != nil {
			return ids, fmt.Errorf("reconcile: %w", err)
		}
		if written {
			ids = append(ids, c.ID)
		}
	}
	if len(ids) > 0 {
		s.hub.Wake()
	}
	return ids, nil
}

// Prune deletes the events processed before before (dead-lettered ones
// included), then the processed message ids recorded before before whose
// event is gone, and the revision records older than before and an hour.
// Each document is one change; batch bounds how many documents a pass
// reads at once. Notifications are never pruned.
func (s *Store) Prune(ctx context.Context, before time.Time, batch int) (notify.PruneResult, error) {
	var res notify.PruneResult
	if batch < 1 {
		return res, fmt.Errorf("prune: batch must be at least 1, got %d", batch)
	}
	cut := msTime(before)
	// Events first, in every document, so that the second pass sees which
	// events are gone.
	for pass := range 2 {
		var last int64
		for {
			cands, err := findAll[doc](ctx, s.n, bson.D{
				{Key: "settled", Value: bson.D{{Key: "$lt", Value: cut}}},
				{Key: "_id", Value: bson.D{{Key: "$gt", Value: key(last)}}},
			}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(batch)).
				SetProjection(idOnly))
			if err != nil {
				return res, fmt.Errorf("prune: %w", err)
			}
			for _, c := range cands {
				last = c.ID
				var events, msgs int64
				var gone map[int64]bool
				if pass == 1 {
					if gone, err = s.foreignEventsGone(ctx, c.ID); err != nil {
						return res, fmt.Errorf("prune: %w", err)
					}
				}
				_, _, err := s.change(ctx, c.ID, func(d *doc) error {
					events, msgs = 0, 0
					if pass == 0 {
						d.Events = slices.DeleteFunc(d.Events, func(e eventDoc) bool {
							old := e.ProcessedAt != nil && e.ProcessedAt.Before(cut)
							if old {
								events++
							}
							return old
						})
					} else {
						d.Processed = slices.DeleteFunc(d.Processed, func(p procDoc) bool {
							if p.ProcessedAt == nil || !p.ProcessedAt.Before(cut) {
								return false
							}
							if p.MessageID/eventSpan == d.ID {
								if slices.ContainsFunc(d.Events, func(e eventDoc) bool { return e.ID == p.MessageID }) {
									return false
								}
							} else if !gone[p.MessageID] {
								return false
							}
							msgs++
							return true
						})
					}
					if events == 0 && msgs == 0 {
						return errNoChange
					}
					return nil
				})
				if err != nil {
					return res, fmt.Errorf("prune notification %d: %w", c.ID, err)
				}
				res.Outbox += events
				res.ProcessedMessages += msgs
			}
			if len(cands) < batch {
				break
			}
		}
	}
	// Orphans: their message ids never had an event here... or had one in
	// a notification since removed.
	r, err := s.orph.DeleteMany(ctx, bson.D{{Key: "processed_at", Value: bson.D{{Key: "$lt", Value: cut}}}})
	if err != nil {
		return res, fmt.Errorf("prune orphan messages: %w", classify(err))
	}
	res.ProcessedMessages += r.DeletedCount
	revCut := time.Now().Add(-time.Hour)
	if cut.Before(revCut) {
		revCut = cut
	}
	if _, err := s.revs.DeleteMany(ctx, bson.D{{Key: "at", Value: bson.D{{Key: "$lt", Value: revCut}}}}); err != nil {
		return res, fmt.Errorf("prune revisions: %w", classify(err))
	}
	return res, nil
}

// foreignEventsGone reports, for the processed message ids of notification
// id that name another notification's event, whether that event is gone.
func (s *Store) foreignEventsGone(ctx context.Context, id int64) (map[int64]bool, error) {
	d, ok, err := s.load(ctx, id)
	if err != nil || !ok {
		return nil, err
	}
	gone := map[int64]bool{}
	for _, p := range d.Processed {
		owner := p.MessageID / eventSpan
		if owner == id {
			continue
		}
		o, ok, err := s.load(ctx, owner)
		if err != nil {
			return nil, err
		}
		gone[p.MessageID] = !ok || !slices.ContainsFunc(o.Events, func(e eventDoc) bool { return e.ID == p.MessageID })
	}
	return gone, nil
}

// PruneOlderThan is Prune with the cut-off age before this process's clock.
func (s *Store) PruneOlderThan(ctx context.Context, age time.Duration, batch int) (notify.PruneResult, error) {
	return s.Prune(ctx, now().Add(-age), batch)
}

// List returns a page of the notifications f selects, newest first, without
// their bodies (index list_idx and its user, status and channel variants).
func (s *Store) List(ctx context.Context, f notify.ListFilter) (notify.ListPage, error) {
	if f.Limit < 1 {
		return notify.ListPage{}, fmt.Errorf("list notifications: limit must be at least 1, got %d", f.Limit)
	}
	filter := listFilter(f)
	ds, err := findAll[doc](ctx, s.n, filter, options.Find().
		SetSort(bson.D{{Key: "created_at", Value: -1}, {Key: "_id", Value: -1}}).
		SetLimit(int64(f.Limit+1)).
		SetProjection(bson.D{{Key: "events", Value: 0}, {Key: "processed", Value: 0}, {Key: "history", Value: 0}, {Key: "body", Value: 0}}))
	if err != nil {
		return notify.ListPage{}, fmt.Errorf("list notifications: %w", err)
	}
	items := make([]notify.Notification, len(ds))
	for i := range ds {
		items[i] = ds[i].notification()
	}
	return notify.NewListPage(items, f.Limit), nil
}

// listFilter is the query of a listing.
func listFilter(f notify.ListFilter) bson.D {
	filter := bson.D{}
	if f.UserID != "" {
		filter = append(filter, bson.E{Key: "user_id", Value: f.UserID})
	}
	switch f.Status {
	case "":
	case notify.StatusScheduled:
		// Stored pending with a send_at ahead (see notify.StatusAt).
		filter = append(filter, bson.E{Key: "status", Value: string(notify.StatusPending)},
			bson.E{Key: "send_at", Value: bson.D{{Key: "$gt", Value: now()}}})
	case notify.StatusPending:
		filter = append(filter, bson.E{Key: "status", Value: string(notify.StatusPending)},
			bson.E{Key: "$or", Value: bson.A{
				bson.D{{Key: "send_at", Value: bson.D{{Key: "$exists", Value: false}}}},
				bson.D{{Key: "send_at", Value: bson.D{{Key: "$lte", Value: now()}}}},
			}})
	default:
		filter = append(filter, bson.E{Key: "status", Value: string(f.Status)})
	}
	if f.Channel != "" {
		filter = append(filter, bson.E{Key: "channel", Value: f.Channel})
	}
	created := bson.D{}
	if !f.CreatedAfter.IsZero() {
		// Bounds finer than milliseconds: a row at 12.3456 is created at
		// or after 12.3455 only if its stored 12.345 is; round up.
		created = append(created, bson.E{Key: "$gte", Value: ceilMS(f.CreatedAfter)})
	}
	if !f.CreatedBefore.IsZero() {
		created = append(created, bson.E{Key: "$lt", Value: ceilMS(f.CreatedBefore)})
	}
	if len(created) > 0 {
		filter = append(filter, bson.E{Key: "created_at", Value: created})
	}
	if f.After != nil {
		at := msTime(f.After.CreatedAt)
		filter = append(filter, bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: "created_at", Value: bson.D{{Key: "$lt", Value: at}}}},
			bson.D{{Key: "created_at", Value: at}, {Key: "_id", Value: bson.D{{Key: "$lt", Value: key(f.After.ID)}}}},
		}})
	}
	return filter
}

func ceilMS(t time.Time) time.Time {
	m := msTime(t)
	if m.Before(t) {
		m = m.Add(time.Millisecond)
	}
	return m
}
