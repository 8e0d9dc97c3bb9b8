package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/testkit/deliverytest"
)

// The subtests of the operations: dead-letter inspection, redrive and
// retention.

// waitPast polls until the wall clock is past t. The stores stamp rows with
// the same host clock (the database's now() or time.Now), so a row written
// after waitPast(t) returns carries a time after t.
func waitPast(t *testing.T, at time.Time) {
	t.Helper()
	require.Eventually(t, func() bool { return time.Now().After(at) }, wait, time.Millisecond)
}

// boundary returns a time that every row written before the call precedes
// and every row written after it follows, with a margin for the stores'
// microsecond precision.
func boundary(t *testing.T) time.Time {
	t.Helper()
	return boundaryWithin(t, 2*time.Millisecond)
}

// boundaryWithin is a boundary with margin on either side of it.
func boundaryWithin(t *testing.T, margin time.Duration) time.Time {
	t.Helper()
	waitPast(t, time.Now().Add(margin))
	cut := time.Now()
	waitPast(t, cut.Add(margin))
	return cut
}

// deadLetter fails n for good, as a worker does after the last retry, with
// msgID as the dead message, and returns the stored notification.
func deadLetter(t *testing.T, ctx context.Context, s Store, msgID int64, n notify.Notification, reason string) notify.Notification {
	t.Helper()
	require.NoError(t, recordFailure(ctx, s, msgID, n.ID, reason, true))
	got := get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusFailed, got.Status)
	require.NotNil(t, got.FailedAt, "a dead-lettered notification has failed_at")
	return got
}

func notificationIDs(ns []notify.Notification) []int64 {
	return pluck(ns, func(n notify.Notification) int64 { return n.ID })
}

func deadLetterCount(t *testing.T, ctx context.Context, s Store) int64 {
	t.Helper()
	st, err := s.OutboxStats(ctx)
	require.NoError(t, err)
	return st.DeadLetters
}

func testDeadLetters(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	none, err := s.DeadLetters(ctx, notify.DeadLetterFilter{})
	require.NoError(t, err)
	require.Empty(t, none)

	var ns []notify.Notification
	for i := range 5 {
		ns = append(ns, create(t, ctx, s, i))
	}
	// One sent and one still pending: neither is a dead letter.
	_, err = deliverytest.Deliver(ctx, s, 100, ns[3].ID, func(context.Context) error { return nil })
	require.NoError(t, err)

	// Failed out of id order, each strictly later than the one before, so
	// that failed_at, not id, decides the order.
	var failed []notify.Notification
	for k, i := range []int{2, 0, 4, 1} {
		if k > 0 {
			waitPast(t, failed[k-1].FailedAt.Add(time.Millisecond))
		}
		failed = append(failed, deadLetter(t, ctx, s, int64(200+i), ns[i], "550 mailbox unavailable"))
	}
	require.EqualValues(t, 4, deadLetterCount(t, ctx, s))

	got, err := s.DeadLetters(ctx, notify.DeadLetterFilter{})
	require.NoError(t, err)
	require.Equal(t, []int64{ns[1].ID, ns[4].ID, ns[0].ID, ns[2].ID}, notificationIDs(got), "newest failure first")
	for i, n := range got {
		// Each is the whole stored notification.
		want := get(t, ctx, s, n.ID)
		require.Equal(t, notify.StatusFailed, n.Status)
		require.Equal(t, want.UserID, n.UserID)
		require.Equal(t, want.To, n.To)
		require.Equal(t, want.Subject, n.Subject)
		require.Equal(t, want.Body, n.Body)
		require.Equal(t, 1, n.Attempts)
		require.Equal(t, "550 mailbox unavailable", n.LastError)
		require.Nil(t, n.SentAt)
		require.NotNil(t, n.FailedAt)
		require.True(t, want.FailedAt.Equal(*n.FailedAt), "failed_at %v, stored %v", n.FailedAt, want.FailedAt)
		require.WithinDuration(t, time.Now(), *n.FailedAt, time.Minute)
		if i > 0 {
			require.True(t, n.FailedAt.Before(*got[i-1].FailedAt), "failed_at not descending: %v", notificationIDs(got))
		}
	}

	// A pending and a sent notification have no failed_at.
	for _, n := range []notify.Notification{ns[3]} {
		g := get(t, ctx, s, n.ID)
		require.Equal(t, notify.StatusSent, g.Status)
		require.Nil(t, g.FailedAt)
	}
	c := create(t, ctx, s, 9)
	require.Nil(t, c.FailedAt)

	// Whatever the times, the order is (failed_at, id) descending: equal
	// failure times fall back to id.
	same := create(t, ctx, s, 10)
	deadLetter(t, ctx, s, 300, same, "x")
	got, err = s.DeadLetters(ctx, notify.DeadLetterFilter{})
	require.NoError(t, err)
	require.Len(t, got, 5)
	for i := 1; i < len(got); i++ {
		a, b := got[i-1], got[i]
		require.True(t, a.FailedAt.After(*b.FailedAt) || (a.FailedAt.Equal(*b.FailedAt) && a.ID > b.ID),
			"order: %v", notificationIDs(got))
	}
}

func testDeadLettersFilter(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	reasons := []string{
		"550 Mailbox UNAVAILABLE",
		"421 try again later",
		"decode payload: unexpected EOF",
		"552 mailbox full",
	}
	var failed []notify.Notification // in failure order
	for i, reason := range reasons {
		n := create(t, ctx, s, i)
		if i > 0 {
			waitPast(t, failed[i-1].FailedAt.Add(time.Millisecond))
		}
		failed = append(failed, deadLetter(t, ctx, s, int64(500+i), n, reason))
	}
	pending := create(t, ctx, s, 99)
	newestFirst := func(idx ...int) []int64 {
		return pluck(idx, func(k int) int64 { return failed[k].ID })
	}

	for _, tc := range []struct {
		name string
		f    notify.DeadLetterFilter
		want []int64
	}{
		{"all", notify.DeadLetterFilter{}, newestFirst(3, 2, 1, 0)},
		{"ids", notify.DeadLetterFilter{IDs: []int64{failed[0].ID, failed[2].ID, pending.ID, 987654}}, newestFirst(2, 0)},
		{"one id", notify.DeadLetterFilter{IDs: []int64{failed[1].ID}}, newestFirst(1)},
		{"since is inclusive", notify.DeadLetterFilter{Since: *failed[2].FailedAt}, newestFirst(3, 2)},
		{"since before all", notify.DeadLetterFilter{Since: failed[0].FailedAt.Add(-time.Hour)}, newestFirst(3, 2, 1, 0)},
		{"since after all", notify.DeadLetterFilter{Since: time.Now().Add(time.Hour)}, nil},
		{"error contains, any case", notify.DeadLetterFilter{ErrorContains: "mailBOX"}, newestFirst(3, 0)},
		{"error contains, exact", notify.DeadLetterFilter{ErrorContains: "421 try again later"}, newestFirst(1)},
		{"error contains, no match", notify.DeadLetterFilter{ErrorContains: "timeout"}, nil},
		// LIKE wildcards are plain characters.
		{"error contains, percent", notify.DeadLetterFilter{ErrorContains: "5%"}, nil},
		{"error contains, underscore", notify.DeadLetterFilter{ErrorContains: "_"}, nil},
		{"limit", notify.DeadLetterFilter{Limit: 2}, newestFirst(3, 2)},
		{"limit above count", notify.DeadLetterFilter{Limit: 10}, newestFirst(3, 2, 1, 0)},
		{"combined", notify.DeadLetterFilter{
			IDs:           []int64{failed[0].ID, failed[1].ID, failed[3].ID},
			Since:         *failed[1].FailedAt,
			ErrorContains: "MAILBOX",
			Limit:         5,
		}, newestFirst(3)},
		{"combined with limit", notify.DeadLetterFilter{ErrorContains: "mailbox", Limit: 1}, newestFirst(3)},
	} {
		got, err := s.DeadLetters(ctx, tc.f)
		require.NoError(t, err, tc.name)
		if tc.want == nil {
			require.Empty(t, got, tc.name)
			continue
		}
		require.Equal(t, tc.want, notificationIDs(got), tc.name)
	}

	_, err := s.DeadLetters(ctx, notify.DeadLetterFilter{Limit: -1})
	require.Error(t, err, "a negative limit")
}

// A listing resumed after a position (the API's cursor) goes on strictly
// after it, in the same order, with the same filters: the pages together
// are the whole listing, nothing twice.
func testDeadLettersPaging(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	var failed []notify.Notification
	for i := range 5 {
		n := create(t, ctx, s, i)
		if i > 0 {
			waitPast(t, failed[i-1].FailedAt.Add(time.Millisecond))
		}
		reason := "550 mailbox unavailable"
		if i == 2 {
			reason = "421 busy"
		}
		failed = append(failed, deadLetter(t, ctx, s, int64(700+i), n, reason))
	}
	for _, f := range []notify.DeadLetterFilter{{}, {ErrorContains: "550"}} {
		all, err := s.DeadLetters(ctx, f)
		require.NoError(t, err)
		var paged []int64
		f.Limit = 2
		for range 10 {
			page, err := s.DeadLetters(ctx, f)
			require.NoError(t, err)
			paged = append(paged, notificationIDs(page)...)
			if len(page) < f.Limit {
				break
			}
			last := page[len(page)-1]
			f.After = &notify.DeadLetterPosition{FailedAt: *last.FailedAt, ID: last.ID}
		}
		require.Equal(t, notificationIDs(all), paged, "filter %+v", f)
	}
	all, err := s.DeadLetters(ctx, notify.DeadLetterFilter{})
	require.NoError(t, err)
	require.Len(t, all, 5)
	// After the oldest: nothing.
	oldest := all[len(all)-1]
	rest, err := s.DeadLetters(ctx, notify.DeadLetterFilter{After: &notify.DeadLetterPosition{FailedAt: *oldest.FailedAt, ID: oldest.ID}})
	require.NoError(t, err)
	require.Empty(t, rest)
}

func testRedriveFailed(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	wake := s.Subscribe(subCtx)

	n := create(t, ctx, s, 1)
	// The event is relayed, retried by the worker and finally
	// dead-lettered under its message id.
	evs := allEvents(t, ctx, s)
	require.Len(t, evs, 1)
	old := evs[0].ID
	relayAll(t, ctx, h)
	require.NoError(t, recordFailure(ctx, s, old, n.ID, "421 busy", false))
	// The retry's copy (retry count 1) is the one dead-lettered.
	require.NoError(t, recordCopyFailure(ctx, s, notify.ClaimRequest{MessageID: old, NotificationID: n.ID, RetryCount: 1}, "550 mailbox unavailable", true))
	require.Equal(t, notify.StatusFailed, get(t, ctx, s, n.ID).Status)
	require.EqualValues(t, 1, deadLetterCount(t, ctx, s))
	// The dead-lettering wrote its notification.failed event.
	st := relayStatus(t, ctx, s)
	require.Len(t, st, 1)
	require.Equal(t, notify.EventFailed, st[0].Type)
	require.Zero(t, unprocessed(t, ctx, s))
	require.Equal(t, 2, h.Count(t, "outbox"))
	require.Equal(t, 1, h.Count(t, "processed_messages"))

	// Wake-ups from the create (or from the listener connecting) are
	// taken now, so that the one below can only come from the redrive.
	select {
	case <-wake:
	case <-time.After(wait):
		t.Fatal("no wake-up after a create")
	}
	select {
	case <-wake:
	default:
	}

	ok, err := s.Redrive(ctx, n.ID)
	require.NoError(t, err)
	require.True(t, ok)
	select {
	case _, open := <-wake:
		require.True(t, open)
	case <-time.After(wait):
		t.Fatal("no wake-up after a redrive committed")
	}

	got := get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusPending, got.Status)
	require.Nil(t, got.FailedAt)
	require.Nil(t, got.SentAt)
	require.Equal(t, 2, got.Attempts, "attempts are history: kept")
	require.Empty(t, got.LastError, "last_error describes the current state: none until a new failure")
	as, err := s.Attempts(ctx, n.ID)
	require.NoError(t, err)
	require.NotEmpty(t, as, "the history stays in the attempts")
	require.Equal(t, "550 mailbox unavailable", as[len(as)-1].Error)
	require.Zero(t, deadLetterCount(t, ctx, s))
	dead, err := s.DeadLetters(ctx, notify.DeadLetterFilter{})
	require.NoError(t, err)
	require.Empty(t, dead)

	// A fresh event under a new outbox id, unprocessed, for the same
	// notification.
	require.Equal(t, 3, h.Count(t, "outbox"))
	require.EqualValues(t, 1, unprocessed(t, ctx, s))
	evs = allEvents(t, ctx, s)
	require.Len(t, evs, 1)
	fresh := evs[0]
	require.Greater(t, fresh.ID, old)
	require.Equal(t, notify.EventRequested, fresh.Type)
	r, nid, err := notify.Message{ID: fresh.ID, Type: fresh.Type, Payload: fresh.Payload}.Decode()
	require.NoError(t, err)
	require.Equal(t, n.ID, nid)
	require.Equal(t, notify.NewRequested(n), r)

	// Redriving again does nothing: it is pending now.
	ok, err = s.Redrive(ctx, n.ID)
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, 3, h.Count(t, "outbox"))

	// The table transport sees it as a first delivery.
	ms, err := s.Claim(ctx, "w", 10, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []int64{fresh.ID}, msgIDs(ms))
	require.Zero(t, ms[0].RetryCount)

	// The old message is still a duplicate; the new one sends.
	sends := 0
	send := func(context.Context) error { sends++; return nil }
	out, err := deliverytest.Deliver(ctx, s, old, n.ID, send)
	require.NoError(t, err)
	require.Equal(t, notify.OutcomeDuplicate, out)
	require.Zero(t, sends)
	out, err = deliverytest.Deliver(ctx, s, fresh.ID, n.ID, send)
	require.NoError(t, err)
	require.Equal(t, notify.OutcomeSent, out)
	require.Equal(t, 1, sends)
	got = get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusSent, got.Status)
	require.Equal(t, 3, got.Attempts)
	require.NotNil(t, got.SentAt)
	require.Nil(t, got.FailedAt)
	// Settled again: a second status event, this time sent.
	st = relayStatus(t, ctx, s)
	require.Len(t, st, 1)
	require.Equal(t, notify.EventSent, st[0].Type)
	ev, err := notify.DecodeStatus(st[0].Payload)
	require.NoError(t, err)
	require.Equal(t, 3, ev.Attempts)
}

func testRedriveNotFailed(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	sent := create(t, ctx, s, 1)
	_, err := deliverytest.Deliver(ctx, s, 1, sent.ID, func(context.Context) error { return nil })
	require.NoError(t, err)
	pending := create(t, ctx, s, 2)
	require.NoError(t, recordFailure(ctx, s, 2, pending.ID, "421 busy", false))

	before := map[int64]notify.Notification{}
	for _, n := range []notify.Notification{sent, pending} {
		g := get(t, ctx, s, n.ID)
		before[n.ID] = g
	}
	for _, n := range []notify.Notification{sent, pending} {
		ok, err := s.Redrive(ctx, n.ID)
		require.NoError(t, err)
		require.False(t, ok, "redrive of a %s notification", before[n.ID].Status)
		got := get(t, ctx, s, n.ID)
		require.Equal(t, before[n.ID], got, "a redrive that did not apply changes nothing")
	}
	require.Equal(t, 3, h.Count(t, "outbox"), "no event written (two created, one sent)")
	require.Equal(t, 2, h.Count(t, "processed_messages"), "the sent message, and the retried one's mark")

	ok, err := s.Redrive(ctx, 987654)
	require.ErrorIs(t, err, notify.ErrNotFound)
	require.False(t, ok)
	require.Equal(t, 3, h.Count(t, "outbox"))
}

// pruneRows are the rows testPrune prunes around its cut.
type pruneRows struct {
	cut                          time.Time
	dead, unmarked, late, recent notify.Notification
	unmarkedID, lateID, recentID int64
}

// pruneSetup writes testPrune's rows: relayed and delivered ones before
// the cut, a dead letter, rows delivered before they were marked, and a
// recent processed row after the cut.
func pruneSetup(t *testing.T, ctx context.Context, s Store) pruneRows {
	noSend := func(context.Context) error { return nil }
	relayOnly := func(want ...int64) {
		t.Helper()
		_, err := relay.Batch(ctx, s, 100, nil, func(_ context.Context, evs []notify.Event) ([]int64, error) {
			var out []int64
			for _, e := range evs {
				for _, w := range want {
					if e.ID == w {
						out = append(out, e.ID)
					}
				}
			}
			return out, nil
		})

		require.NoError(t, err)
	}

	// Before the cut: relayed and delivered events (old outbox rows, old
	// dedup rows).
	var olds []notify.Notification
	for i := range 6 {
		olds = append(olds, create(t, ctx, s, i))
	}
	oldEvents := allEvents(t, ctx, s)
	require.Len(t, oldEvents, 6)
	relayOnly(ids(oldEvents)...)
	for i, e := range oldEvents {
		_, err := deliverytest.Deliver(ctx, s, e.ID, olds[i].ID, noSend)
		require.NoError(t, err)
	}
	// A row dead-lettered by the table transport, and its dedup row.
	dead := create(t, ctx, s, 10)
	ms, err := s.Claim(ctx, "w", 10, time.Hour)
	require.NoError(t, err)
	require.Len(t, ms, 1)
	require.NoError(t, s.Finish(ctx, []notify.OutboxKey{ms[0].Key()}, "w", "550 mailbox unavailable"))
	require.NoError(t, recordFailure(ctx, s, ms[0].ID, dead.ID, "550 mailbox unavailable", true))
	// A dedup row whose message never had an outbox row here.
	_, err = deliverytest.Deliver(ctx, s, 999999, olds[0].ID, noSend)
	require.NoError(t, err)
	// Delivered before their rows were marked: one stays unprocessed (a
	// table worker that crashed before Finish), one is marked after the cut.
	unmarked := create(t, ctx, s, 20)
	late := create(t, ctx, s, 21)
	evs := allEvents(t, ctx, s)
	require.Len(t, evs, 2)
	unmarkedID, lateID := evs[0].ID, evs[1].ID
	for _, d := range []struct {
		msg int64
		n   notify.Notification
	}{{unmarkedID, unmarked}, {lateID, late}} {
		_, err := deliverytest.Deliver(ctx, s, d.msg, d.n.ID, noSend)
		require.NoError(t, err)
	}

	// Their status events (six sent, one failed, two sent), relayed
	// before the cut: old processed rows.
	require.Len(t, relayStatus(t, ctx, s), 9)

	cut := boundary(t)

	// After the cut: a recent processed row and a recent dedup row.
	relayOnly(lateID)
	recent := create(t, ctx, s, 30)
	evs = allEvents(t, ctx, s)
	require.Len(t, evs, 2)
	recentID := evs[1].ID
	relayOnly(recentID)
	_, err = deliverytest.Deliver(ctx, s, recentID, recent.ID, noSend)
	require.NoError(t, err)
	require.Len(t, relayStatus(t, ctx, s), 1, "the recent row's status event, processed after the cut")
	return pruneRows{cut: cut, dead: dead, unmarked: unmarked, late: late, recent: recent, unmarkedID: unmarkedID, lateID: lateID, recentID: recentID}
}

func testPrune(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	r := pruneSetup(t, ctx, s)
	cut, dead, unmarked, late, recent := r.cut, r.dead, r.unmarked, r.late, r.recent
	unmarkedID, lateID, recentID := r.unmarkedID, r.lateID, r.recentID
	require.Equal(t, 20, h.Count(t, "outbox"))
	require.Equal(t, 11, h.Count(t, "processed_messages"))
	notifications := h.Count(t, "notifications")

	_, err := s.Prune(ctx, cut, 0)
	require.Error(t, err, "batch 0")
	require.Equal(t, 20, h.Count(t, "outbox"))

	// Batches of 2, fewer than either table has to delete.
	res, err := s.Prune(ctx, cut, 2)
	require.NoError(t, err)
	require.Equal(t, notify.PruneResult{Outbox: 16, ProcessedMessages: 8}, res)
	// Left: the unprocessed row, the row processed after the cut, the
	// recent row and its status event; and their dedup rows (the first
	// two are old, but their outbox rows are still there).
	require.Equal(t, 4, h.Count(t, "outbox"))
	require.Equal(t, 3, h.Count(t, "processed_messages"))
	require.Equal(t, notifications, h.Count(t, "notifications"), "notifications are never pruned")
	require.Equal(t, []int64{unmarkedID}, ids(allEvents(t, ctx, s)))
	for _, d := range []struct {
		msg int64
		n   notify.Notification
	}{{unmarkedID, unmarked}, {lateID, late}, {recentID, recent}} {
		out, err := deliverytest.Deliver(ctx, s, d.msg, d.n.ID, func(context.Context) error {
			t.Errorf("message %d sent again after a prune", d.msg)
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, notify.OutcomeDuplicate, out, "message %d", d.msg)
	}
	require.Equal(t, 3, h.Count(t, "processed_messages"), "the dedup rows were kept, not re-inserted")

	// Nothing more to do.
	res, err = s.Prune(ctx, cut, 2)
	require.NoError(t, err)
	require.Equal(t, notify.PruneResult{}, res)

	// The dead letter outlives its pruned event and can be redriven.
	got, err := s.DeadLetters(ctx, notify.DeadLetterFilter{})
	require.NoError(t, err)
	require.Equal(t, []int64{dead.ID}, notificationIDs(got))
	ok, err := s.Redrive(ctx, dead.ID)
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 2, unprocessed(t, ctx, s))

	// A cut later than everything prunes every processed row, and the
	// dedup rows of the pruned ones, but never an unprocessed row.
	waitPast(t, time.Now().Add(2*time.Millisecond))
	res, err = s.Prune(ctx, time.Now(), 1)
	require.NoError(t, err)
	require.Equal(t, notify.PruneResult{Outbox: 3, ProcessedMessages: 2}, res)
	require.Equal(t, 2, h.Count(t, "outbox"))
	require.EqualValues(t, 2, unprocessed(t, ctx, s))
	require.Equal(t, 1, h.Count(t, "processed_messages"))
}

// PruneOlderThan measures the age on the store's clock: rows younger than
// it stay, rows older go.
func testPruneOlderThan(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	evs := relayAll(t, ctx, h)
	require.Len(t, evs, 1)
	_, err := deliverytest.Deliver(ctx, s, evs[0].ID, n.ID, func(context.Context) error { return nil })
	require.NoError(t, err)

	_, err = s.PruneOlderThan(ctx, time.Hour, 0)
	require.Error(t, err, "batch 0")
	res, err := s.PruneOlderThan(ctx, time.Hour, 10)
	require.NoError(t, err)
	require.Equal(t, notify.PruneResult{}, res, "processed a moment ago, not an hour")
	require.Len(t, relayStatus(t, ctx, s), 1)
	require.Equal(t, 2, h.Count(t, "outbox"))

	waitPast(t, time.Now().Add(5*time.Millisecond))
	res, err = s.PruneOlderThan(ctx, 0, 10)
	require.NoError(t, err)
	require.Equal(t, notify.PruneResult{Outbox: 2, ProcessedMessages: 1}, res)
	require.Equal(t, 0, h.Count(t, "outbox"))
	require.Equal(t, 0, h.Count(t, "processed_messages"))
}
