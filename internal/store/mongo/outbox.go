package mongo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/heraldhq/herald/internal/notify"
)

// The outbox is the events array of each notification document. A document
// with an event that can be taken now has due <= now (index due_rank_idx;
// due is the earliest of its open events' available time or, while one is
// leased, its lease's end); the relay and the table transport find
// candidates by it, and lease events with one change of each document,
// which sees the events as they are: two claimers never lease the same
// event.

// order is the order a search takes due documents in.
type order int

const (
	// byDue is the table claim's order, and the relay's: rank by rank
	// (the high documents first, the bulk ones last: issue 34, point 5),
	// each rank in (due, _id) order, the earliest due first, from
	// due_rank_idx, (rank, due, _id), whose range for the rank it walks
	// from the start up to now alone: a document whose event is scheduled
	// for later, or leased, is not read, and one whose event was handed
	// back due at once is due at that moment, behind every document of
	// its rank due before it (issue 32).
	byDue order = iota
)

// cursor is where a search in an order goes on from: after the document
// key with due time due.
type cursor struct {
	due time.Time
	key int64
	set bool
}

// candidate is a document found by a search.
type candidate struct {
	ID  int64     `bson:"id"`
	Due time.Time `bson:"due"`
}

// candidates are the documents with an event due at t, in order ord (of
// rank rank, for byDue), after c.
func (s *Store) candidates(ctx context.Context, t time.Time, c cursor, limit int, ord order, rank int) ([]candidate, error) {
	filter := bson.D{{Key: "due", Value: bson.D{{Key: "$lte", Value: t}}}}
	sort := bson.D{{Key: "_id", Value: 1}}
	switch {
	case ord == byDue:
		filter = bson.D{{Key: "rank", Value: rankFilter(rank)}, filter[0]}
		sort = bson.D{{Key: "due", Value: 1}, {Key: "_id", Value: 1}}
		if c.set {
			filter = append(filter, bson.E{Key: "$or", Value: bson.A{
				bson.D{{Key: "due", Value: bson.D{{Key: "$gt", Value: c.due}}}},
				bson.D{{Key: "due", Value: c.due}, {Key: "_id", Value: bson.D{{Key: "$gt", Value: key(c.key)}}}},
			}})
		}
	case c.set:
		filter = append(filter, bson.E{Key: "_id", Value: bson.D{{Key: "$gt", Value: key(c.key)}}})
	}
	return findAll[candidate](ctx, s.n, filter,
		options.Find().SetSort(sort).SetLimit(int64(limit)).
			SetProjection(bson.D{{Key: "id", Value: 1}, {Key: "due", Value: 1}}))
}

// rankFilter matches the documents of rank: for the normal rank, also
// those with no rank, which a process of an older version (before
// migration 8) writes during a rolling upgrade; the index holds them
// under null, a range of their own, merged in due order with rank 1's.
func rankFilter(rank int) any {
	if rank == notify.RankNormal {
		return bson.D{{Key: "$in", Value: bson.A{nil, rank}}}
	}
	return rank
}

// candidateBatch is how many candidates one search reads. FerretDB v1
// reads the whole collection for every search whatever its limit (the due
// filter is not pushed down to SQLite), so one search serves the next
// claims for candidateTTL.
const (
	candidateBatch = 512
	candidateTTL   = 250 * time.Millisecond
)

// candidateCache holds the candidates a search read beyond its batch.
type candidateCache struct {
	mu  sync.Mutex
	ids []int64
	at  time.Time
}

func (c *candidateCache) put(ids []int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids, c.at = slices.Clone(ids), time.Now()
}

// take returns up to n cached candidates, none once they are older than
// candidateTTL.
func (c *candidateCache) take(n int) []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) > candidateTTL {
		c.ids = nil
	}
	n = min(n, len(c.ids))
	out := c.ids[:n:n]
	c.ids = c.ids[n:]
	return out
}

// lease leases up to limit events due at now whose type want accepts, from
// documents in order ord, to token until until(now). A document whose due
// events are all of other types gives nothing, and the search reads on
// past it.
func (s *Store) lease(ctx context.Context, token string, limit int, ord order, want func(typ string) bool, until func(t time.Time) time.Time) ([]eventDoc, error) {
	if ord != byDue {
		out, err := s.leaseRank(ctx, token, limit, ord, 0, &s.cands, want, until, nil)
		slices.SortFunc(out, func(a, b eventDoc) int { return cmp.Compare(a.ID, b.ID) })
		return out, err
	}
	var out []eventDoc
	for rank := range notify.RankCount {
		if len(out) >= limit {
			break
		}
		var err error
		if out, err = s.leaseRank(ctx, token, limit, ord, rank, &s.dueCands[rank], want, until, out); err != nil {
			return out, err
		}
	}
	slices.SortFunc(out, func(a, b eventDoc) int {
		return cmp.Or(cmp.Compare(a.Priority.Rank(), b.Priority.Rank()), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// leaseRank is lease for the documents of one rank (byDue; any, byID),
// appending to out up to limit events in all.
func (s *Store) leaseRank(ctx context.Context, token string, limit int, ord order, rank int, cache *candidateCache, want func(typ string) bool, until func(t time.Time) time.Time, out []eventDoc) ([]eventDoc, error) {
	t := now()
	// Candidates read recently come first (see candidateCache); each
	// change sees the document as it is, so a stale one gives nothing.
	if ids := cache.take(limit); len(ids) > 0 {
		var err error
		if out, err = s.leaseIn(ctx, ids, token, limit, want, until, out); err != nil {
			return out, err
		}
	}
	// A candidate another claimer leased meanwhile gives nothing: read on
	// past the last candidate until the batch is full or none is left.
	var last cursor
	for len(out) < limit {
		found, err := s.candidates(ctx, t, last, candidateBatch, ord, rank)
		if err != nil {
			return out, fmt.Errorf("find due events: %w", err)
		}
		if len(found) == 0 {
			break
		}
		end := found[len(found)-1]
		last = cursor{due: end.Due, key: end.ID, set: true}
		ids := make([]int64, len(found))
		for i, c := range found {
			ids[i] = c.ID
		}
		i := 0
		for i < len(ids) && len(out) < limit {
			j := min(len(ids), i+limit-len(out))
			if out, err = s.leaseIn(ctx, ids[i:j], token, limit, want, until, out); err != nil {
				return out, err
			}
			i = j
		}
		cache.put(ids[i:])
		if len(ids) < candidateBatch {
			break
		}
	}
	return out, nil
}

// leaseIn leases the due events of the documents ids, appending them to
// out, up to limit in all.
func (s *Store) leaseIn(ctx context.Context, ids []int64, token string, limit int, want func(string) bool, until func(t time.Time) time.Time, out []eventDoc) ([]eventDoc, error) {
	for _, id := range ids {
		if len(out) >= limit {
			break
		}
		var got []eventDoc
		_, _, err := s.change(ctx, id, func(d *doc) error {
			got = got[:0]
			t := now()
			u := until(t).Truncate(time.Millisecond)
			for i := range d.Events {
				e := &d.Events[i]
				if len(out)+len(got) >= limit {
					break
				}
				if e.ProcessedAt != nil || !want(e.Type) || e.AvailableAt.After(t) || (e.LockedUntil != nil && !e.LockedUntil.Before(t)) {
					continue
				}
				e.LockedBy, e.LockedUntil = token, &u
				got = append(got, *e)
				got[len(got)-1].Priority = notify.Priority(d.Priority).OrDefault()
			}
			if len(got) == 0 {
				return errNoChange
			}
			return nil
		})
		if err != nil {
			return out, fmt.Errorf("lease events of notification %d: %w", id, err)
		}
		out = append(out, got...)
	}
	return out, nil
}

// LeaseRelay leases up to limit due unprocessed events of types (nil:
// any), the earliest due first (byDue: an event of a notification with a
// send_at ahead is due then, and neither read nor published before), to
// token for lease, and returns them highest priority first, then in id
// order. It implements relay.Outbox.
func (s *Store) LeaseRelay(ctx context.Context, limit int, types []string, token string, lease time.Duration) ([]notify.Event, error) {
	want := func(typ string) bool { return types == nil || slices.Contains(types, typ) }
	// One end for the whole batch, however long the documents take to
	// lease one by one: the relay's margin runs from the same instant.
	end := now().Add(lease)
	evs, err := s.lease(ctx, token, limit, byDue, want, func(time.Time) time.Time { return end })
	if err != nil {
		// Events leased before the failure come back when their lease
		// ends.
		return nil, err
	}
	events := make([]notify.Event, len(evs))
	for i, e := range evs {
		events[i] = notify.Event{ID: e.ID, Type: e.Type, Payload: []byte(e.Payload), OccurredAt: e.OccurredAt.UTC(), Traceparent: e.Traceparent, Priority: e.Priority}
	}
	return events, nil
}

// SettleRelay marks the events of mark processed (any lease's confirm
// counts: the broker has it) and releases the events of release still
// leased to token, one document write per notification. It implements
// relay.Outbox.
func (s *Store) SettleRelay(ctx context.Context, mark, release []notify.OutboxKey, token string) error {
	ok := make(map[int64]bool, len(mark))
	for _, k := range mark {
		ok[k.ID] = true
	}
	var errs []error
	for nid, group := range byNotification(append(slices.Clone(mark), release...)) {
		_, _, err := s.change(ctx, nid, func(d *doc) error {
			changed := false
			t := now()
			for i := range d.Events {
				e := &d.Events[i]
				if !slices.Contains(group, e.ID) || e.ProcessedAt != nil {
					continue
				}
				switch {
				case ok[e.ID]:
					e.ProcessedAt, e.LockedUntil = &t, nil
					changed = true
				case e.LockedBy == token:
					e.LockedBy, e.LockedUntil = "", nil
					changed = true
				}
			}
			if !changed {
				return errNoChange
			}
			return nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("settle events of notification %d: %w", nid, err))
		}
	}
	return errors.Join(errs...)
}

// byNotification groups event ids by the notification they belong to.
func byNotification(keys []notify.OutboxKey) map[int64][]int64 {
	out := map[int64][]int64{}
	for _, k := range keys {
		out[k.ID/eventSpan] = append(out[k.ID/eventSpan], k.ID)
	}
	return out
}

// OutboxStats counts the backlog, the unprocessed events of the documents
// with something due now (see notify.OutboxStats), and how long the one
// due the longest has been due; the documents with events scheduled for
// later (up to notify.ScheduledCap); and the dead letters. It reads
// due_rank_idx's ranges, one per rank: up to now for the backlog (their
// counts only), past now for the scheduled ones (counted, up to the cap).
func (s *Store) OutboxStats(ctx context.Context) (notify.OutboxStats, error) {
	var st notify.OutboxStats
	t := now()
	var oldest time.Time
	for rank := range notify.RankCount {
		cur, err := s.n.Find(ctx, bson.D{{Key: "rank", Value: rankFilter(rank)}, {Key: "due", Value: bson.D{{Key: "$lte", Value: t}}}},
			options.Find().SetProjection(bson.D{{Key: "open", Value: 1}, {Key: "open_status", Value: 1}, {Key: "due", Value: 1}}))
		if err != nil {
			return st, fmt.Errorf("outbox stats: %w", classify(err))
		}
		var ds []struct {
			Open       int64      `bson:"open"`
			OpenStatus int64      `bson:"open_status"`
			Due        *time.Time `bson:"due"`
		}
		if err := cur.All(ctx, &ds); err != nil {
			return st, fmt.Errorf("outbox stats: %w", classify(err))
		}
		for _, d := range ds {
			st.Unprocessed += d.Open
			st.UnprocessedStatus += d.OpenStatus
			if d.Due != nil && (oldest.IsZero() || d.Due.Before(oldest)) {
				oldest = *d.Due
			}
		}
		if st.Scheduled <= notify.ScheduledCap {
			n, err := s.n.CountDocuments(ctx, bson.D{{Key: "rank", Value: rankFilter(rank)}, {Key: "due", Value: bson.D{{Key: "$gt", Value: t}}}},
				options.Count().SetLimit(notify.ScheduledCap+1-st.Scheduled))
			if err != nil {
				return st, fmt.Errorf("outbox stats: %w", classify(err))
			}
			st.Scheduled += n
		}
	}
	if !oldest.IsZero() {
		st.OldestAge = max(t.Sub(oldest), 0)
	}
	if st.Scheduled > notify.ScheduledCap {
		st.Scheduled, st.ScheduledCapped = notify.ScheduledCap, true
	}
	n, err := s.n.CountDocuments(ctx, bson.D{{Key: "status", Value: string(notify.StatusFailed)}})
	if err != nil {
		return st, fmt.Errorf("outbox stats: %w", classify(err))
	}
	st.DeadLetters = n
	return st, nil
}

// Claim leases up to limit due events that are not status events (those
// are the relay's) to token until now + lease, from the documents due
// earliest (byDue): the notifications' events, and one of a type herald
// does not know, which the worker dead-letters as poison. It implements
// table.Queue.
func (s *Store) Claim(ctx context.Context, token string, limit int, lease time.Duration) ([]notify.Message, error) {
	switch {
	case token == "":
		return nil, errors.New("claim outbox events: empty lease token")
	case limit < 1:
		return nil, fmt.Errorf("claim outbox events: limit must be at least 1, got %d", limit)
	case lease <= 0:
		return nil, fmt.Errorf("claim outbox events: lease must be positive, got %s", lease)
	}
	work := func(typ string) bool { return !notify.IsStatusEvent(typ) }
	evs, err := s.lease(ctx, token, limit, byDue, work, func(t time.Time) time.Time { return t.Add(lease) })
	if err != nil {
		return nil, fmt.Errorf("claim outbox events: %w", err)
	}
	msgs := make([]notify.Message, len(evs))
	for i, e := range evs {
		msgs[i] = notify.Message{ID: e.ID, Type: e.Type, Payload: []byte(e.Payload), RetryCount: e.Retries, OccurredAt: e.OccurredAt.UTC(), Traceparent: e.Traceparent, Priority: e.Priority}
	}
	return msgs, nil
}

// Finish marks events leased to token processed; a non-empty reason
// records them as dead-lettered. It implements table.Queue; the events
// are found by id (OccurredAt is not needed).
func (s *Store) Finish(ctx context.Context, rows []notify.OutboxKey, token, reason string) error {
	for nid, group := range byNotification(rows) {
		_, _, err := s.change(ctx, nid, func(d *doc) error {
			changed := false
			t := now()
			for i := range d.Events {
				e := &d.Events[i]
				if slices.Contains(group, e.ID) && e.LockedBy == token && e.ProcessedAt == nil {
					e.ProcessedAt, e.LockedUntil = &t, nil
					if reason != "" {
						e.LastError = reason
					}
					changed = true
				}
			}
			if !changed {
				return errNoChange
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("finish %d outbox events: %w", len(rows), err)
		}
	}
	return nil
}

// Reschedule ends the lease of an event leased to token and makes it due
// again after delay; with retry it counts a retry and keeps reason. It
// implements table.Queue; the event is found by id.
func (s *Store) Reschedule(ctx context.Context, row notify.OutboxKey, token string, delay time.Duration, reason string, retry bool) error {
	id := row.ID
	_, _, err := s.change(ctx, id/eventSpan, func(d *doc) error {
		for i := range d.Events {
			e := &d.Events[i]
			if e.ID != id || e.LockedBy != token || e.ProcessedAt != nil {
				continue
			}
			e.LockedBy, e.LockedUntil = "", nil
			e.AvailableAt = now().Add(max(delay, 0))
			if retry {
				e.Retries++
				e.LastError = reason
			}
			return nil
		}
		return errNoChange
	})
	if err != nil {
		return fmt.Errorf("reschedule outbox event %d: %w", id, err)
	}
	return nil
}
