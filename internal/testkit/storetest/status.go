package storetest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/deliverytest"
)

// The subtests of the status events: the record that settles a
// notification writes its notification.sent or notification.failed event
// with it, and only that record; the relay selects rows by type, and the
// table transport's claim never hands a status event to a worker.
var statusTests = []subtest{
	{"StatusEventOnSent", testStatusEventOnSent},
	{"StatusEventOnDead", testStatusEventOnDead},
	{"StatusEventNoneUnsettled", testStatusEventNoneUnsettled},
	{"StatusEventNoneOnLostClaim", testStatusEventNoneOnLostClaim},
	{"StatusEventGroupedRecord", testStatusEventGroupedRecord},
	{"RelayBatchTypes", testRelayBatchTypes},
	{"ClaimSkipsStatusEvents", testClaimSkipsStatusEvents},
	{"ReconcileIgnoresStatusEvents", testReconcileIgnoresStatusEvents},
	{"NoStatusEvents", testNoStatusEvents},
}

// apiTime is t as the API writes it.
func apiTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// relayStatus relays the unprocessed status events, confirming every one,
// as a status relay does, and returns them in id order.
func relayStatus(t *testing.T, ctx context.Context, s Store) []notify.Event {
	t.Helper()
	got := relayed(t, ctx, s, notify.StatusEventTypes, true)
	for _, e := range got {
		require.True(t, notify.IsStatusEvent(e.Type), "event %d of type %s relayed as a status event", e.ID, e.Type)
	}
	return got
}

// statusOf decodes one status event and checks that it names n, and that
// its at is RFC 3339 in UTC with Z, as every time herald emits, whatever
// the server's or the database session's time zone.
func statusOf(t *testing.T, e notify.Event, n notify.Notification) notify.StatusEvent {
	t.Helper()
	ev, err := notify.DecodeStatus(e.Payload)
	require.NoError(t, err)
	var raw struct{ At string }
	require.NoError(t, json.Unmarshal(e.Payload, &raw))
	require.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$`, raw.At, "at is RFC 3339 in UTC with Z")
	require.Equal(t, ev.At.UTC().Format(time.RFC3339Nano), raw.At, "at is written as the API writes times")
	require.Equal(t, notify.FormatID(n.ID), ev.NotificationID)
	require.Equal(t, n.UserID, ev.UserID)
	require.Equal(t, n.Channel, ev.Channel)
	return ev
}

func testStatusEventOnSent(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	evs := relayAll(t, ctx, h)
	require.Len(t, evs, 1)
	require.Empty(t, relayStatus(t, ctx, s), "no status event before the delivery")
	out, err := deliverytest.Deliver(ctx, s, evs[0].ID, n.ID, func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, notify.OutcomeSent, out)
	require.EqualValues(t, 1, unprocessed(t, ctx, s), "the status event waits for its relay")
	stats, err := s.OutboxStats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, stats.UnprocessedStatus)

	got := get(t, ctx, s, n.ID)
	st := relayStatus(t, ctx, s)
	require.Len(t, st, 1)
	require.Equal(t, notify.EventSent, st[0].Type)
	require.Greater(t, st[0].ID, evs[0].ID)
	ev := statusOf(t, st[0], n)
	require.Equal(t, string(notify.StatusSent), ev.Status)
	require.Equal(t, 1, ev.Attempts)
	require.Empty(t, ev.LastError)
	require.NotNil(t, got.SentAt)
	require.Equal(t, apiTime(*got.SentAt), apiTime(ev.At), "at is sent_at, as the API shows it")
	require.Zero(t, unprocessed(t, ctx, s))
	require.Empty(t, relayStatus(t, ctx, s), "relayed once")

	// A duplicate delivery of the same message settles nothing: no second
	// event.
	out, err = deliverytest.Deliver(ctx, s, evs[0].ID, n.ID, func(context.Context) error {
		t.Error("sent twice")
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, notify.OutcomeDuplicate, out)
	require.Zero(t, unprocessed(t, ctx, s))
	require.Equal(t, 2, h.Count(t, "outbox"))
}

func testStatusEventOnDead(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	msg := relayAll(t, ctx, h)[0].ID
	attemptOnce(t, ctx, s, msg, 0, n.ID, notify.AttemptRetry, "451 later")
	require.Empty(t, relayStatus(t, ctx, s), "a retry settles nothing")
	attemptOnce(t, ctx, s, msg, 1, n.ID, notify.AttemptDead, "550 no such user")

	got := get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusFailed, got.Status)
	st := relayStatus(t, ctx, s)
	require.Len(t, st, 1)
	require.Equal(t, notify.EventFailed, st[0].Type)
	ev := statusOf(t, st[0], n)
	require.Equal(t, string(notify.StatusFailed), ev.Status)
	require.Equal(t, 2, ev.Attempts)
	require.Equal(t, "550 no such user", ev.LastError)
	require.NotNil(t, got.FailedAt)
	require.Equal(t, apiTime(*got.FailedAt), apiTime(ev.At), "at is failed_at, as the API shows it")
}

// Retry and deferred records leave the notification pending: no event.
func testStatusEventNoneUnsettled(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	msg := relayAll(t, ctx, h)[0].ID
	attemptOnce(t, ctx, s, msg, 0, n.ID, notify.AttemptDeferred, "")
	attemptOnce(t, ctx, s, msg, 0, n.ID, notify.AttemptRetry, "421 busy")
	require.Equal(t, notify.StatusPending, get(t, ctx, s, n.ID).Status)
	require.Zero(t, unprocessed(t, ctx, s))
	require.Equal(t, 1, h.Count(t, "outbox"))
	require.Empty(t, relayStatus(t, ctx, s))
}

// A record whose claim was lost (its lease ran out and another delivery
// took the notification over) applies nothing and writes no event; the
// record that holds the claim writes the one event.
func testStatusEventNoneOnLostClaim(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	msg := relayAll(t, ctx, h)[0].ID
	stale := claimCopy(t, ctx, s, msg, 0, n.ID, 50*time.Millisecond)
	require.Equal(t, notify.ClaimTaken, stale.Status)
	var fresh notify.Claim
	deadline := time.Now().Add(wait)
	for {
		fresh = claimCopy(t, ctx, s, msg, 0, n.ID, lease)
		if fresh.Status == notify.ClaimTaken {
			break
		}
		require.Equal(t, notify.ClaimBusy, fresh.Status)
		require.True(t, time.Now().Before(deadline), "the short lease never ran out")
		time.Sleep(10 * time.Millisecond) // a poll interval, not a synchronisation
	}
	require.False(t, record1(t, ctx, s, stale, notify.AttemptSent, ""), "the lost claim applied")
	require.Empty(t, relayStatus(t, ctx, s), "a lost claim wrote a status event")
	require.Equal(t, notify.StatusPending, get(t, ctx, s, n.ID).Status)

	require.True(t, record1(t, ctx, s, fresh, notify.AttemptDead, "550 gone"))
	st := relayStatus(t, ctx, s)
	require.Len(t, st, 1)
	require.Equal(t, notify.EventFailed, st[0].Type)
	// The lost claim's send is history; the applied one counts.
	require.Equal(t, 1, statusOf(t, st[0], n).Attempts)
	require.False(t, record1(t, ctx, s, fresh, notify.AttemptSent, ""), "recorded twice")
	require.Empty(t, relayStatus(t, ctx, s), "a second record of a settled claim wrote an event")
}

// A grouped record (one ClaimAndRecord of several results) writes one event
// per settled notification, none for the others, and claims in the same
// call are unaffected.
func testStatusEventGroupedRecord(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	var ns []notify.Notification
	for i := range 4 {
		ns = append(ns, create(t, ctx, s, i))
	}
	evs := relayAll(t, ctx, h)
	require.Len(t, evs, 4)
	var reqs []notify.ClaimRequest
	for i, e := range evs[:3] {
		reqs = append(reqs, notify.ClaimRequest{MessageID: e.ID, NotificationID: ns[i].ID})
	}
	cs, err := deliverytest.Claim(ctx, s, reqs, lease)
	require.NoError(t, err)
	results := []notify.DeliveryResult{
		{Claim: cs[0], Outcome: notify.AttemptSent},
		{Claim: cs[1], Outcome: notify.AttemptRetry, Error: "421 busy"},
		{Claim: cs[2], Outcome: notify.AttemptDead, Error: "550 gone"},
	}
	claims, applied, err := s.ClaimAndRecord(ctx,
		[]notify.ClaimRequest{{MessageID: evs[3].ID, NotificationID: ns[3].ID}}, lease, results)
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, true}, applied)
	require.Equal(t, notify.ClaimTaken, claims[0].Status)

	st := relayStatus(t, ctx, s)
	require.Len(t, st, 2)
	byID := map[string]notify.Event{}
	for _, e := range st {
		ev, err := notify.DecodeStatus(e.Payload)
		require.NoError(t, err)
		byID[ev.NotificationID] = e
	}
	require.Equal(t, notify.EventSent, byID[notify.FormatID(ns[0].ID)].Type)
	require.Equal(t, notify.EventFailed, byID[notify.FormatID(ns[2].ID)].Type)
	require.NotContains(t, byID, notify.FormatID(ns[1].ID))
	require.NotContains(t, byID, notify.FormatID(ns[3].ID))
}

func testRelayBatchTypes(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	sent := create(t, ctx, s, 1)
	msg := relayAll(t, ctx, h)[0].ID
	_, err := deliverytest.Deliver(ctx, s, msg, sent.ID, func(context.Context) error { return nil })
	require.NoError(t, err)
	create(t, ctx, s, 2)
	stats, err := s.OutboxStats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, stats.Unprocessed)
	require.EqualValues(t, 1, stats.UnprocessedStatus, "a request is no status event")

	// An empty selection: nothing, publish not called.
	relayNothing(t, ctx, s, []string{}, "for an empty type selection")

	// nil: every type, in id order.
	types := func(evs []notify.Event) []string {
		return pluck(evs, func(e notify.Event) string { return e.Type })
	}
	all := relayed(t, ctx, s, nil, false)
	require.Equal(t, []string{notify.EventSent, notify.EventRequested}, types(all))

	// Each selection takes its own rows only, and marks only them.
	req := allEvents(t, ctx, s)
	require.Equal(t, []string{notify.EventRequested}, types(req))
	st := relayStatus(t, ctx, s)
	require.Equal(t, []string{notify.EventSent}, types(st))
	require.EqualValues(t, 1, unprocessed(t, ctx, s), "the requested row is still unprocessed")
	require.Equal(t, ids(req), ids(allEvents(t, ctx, s)))
	// A selection with an unknown type takes nothing.
	relayNothing(t, ctx, s, []string{"notification.unknown"}, "for a type no row has")
}

// The table transport's claim takes notification.requested rows only: a
// status event handed to a worker would be poison.
func testClaimSkipsStatusEvents(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	ms, err := s.Claim(ctx, "w", 10, time.Hour)
	require.NoError(t, err)
	require.Len(t, ms, 1)
	_, err = deliverytest.Deliver(ctx, s, ms[0].ID, n.ID, func(context.Context) error { return nil })
	require.NoError(t, err)
	require.NoError(t, s.Finish(ctx, []notify.OutboxKey{ms[0].Key()}, "w", ""))
	later := create(t, ctx, s, 2)

	ms, err = s.Claim(ctx, "w2", 10, time.Hour)
	require.NoError(t, err)
	require.Len(t, ms, 1, "the status event was claimed")
	require.Equal(t, notify.EventRequested, ms[0].Type)
	_, nid, err := ms[0].Decode()
	require.NoError(t, err)
	require.Equal(t, later.ID, nid)
	ms, err = s.Claim(ctx, "w3", 10, time.Hour)
	require.NoError(t, err)
	require.Empty(t, ms)
	require.Len(t, relayStatus(t, ctx, s), 1, "the status event is the relay's")
}

// A notification dead-lettered, redriven, and then lost (its fresh event
// relayed, never delivered) is reconciled even while the status event of
// its dead-lettering is still unprocessed: that row carries no delivery.
func testReconcileIgnoresStatusEvents(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	relayAll(t, ctx, h)
	deadLetter(t, ctx, s, 1_000_001, n, "550 no such user")
	ok, err := s.Redrive(ctx, n.ID)
	require.NoError(t, err)
	require.True(t, ok)
	relayOne(t, ctx, s)
	require.EqualValues(t, 1, unprocessed(t, ctx, s), "the dead-lettering's status event is unprocessed")

	cut := quietBoundary(t)
	got, err := s.Reconcile(ctx, time.Since(cut), 100)
	require.NoError(t, err)
	require.Equal(t, []int64{n.ID}, got, "an unprocessed status event hid a lost notification from the reconciler")
	require.Len(t, allEvents(t, ctx, s), 1, "the reconciler's fresh event")
}

// settledRecord is what a store records of a short history, the same
// whether it writes status events or not: one notification sent (and a
// duplicate of its message refused), one retried then dead-lettered. Ids
// and times differ between two stores and are left out; the status events
// are counted apart.
type settledRecord struct {
	Sent, Failed         notify.Notification
	SentAtt, FailedAtt   []notify.Attempt
	Duplicate            notify.Outcome
	Notifications, Dedup int
	DeadLetters          int64
	Unprocessed          int64
	// Outbox counts every outbox row; Status the status events among them
	// (relayed, then confirmed).
	Outbox int
	Status []string
}

// recordHistory plays the history of settledRecord on h's store.
func recordHistory(t *testing.T, ctx context.Context, h Harness) settledRecord {
	t.Helper()
	s := h.Store
	sent, failed := create(t, ctx, s, 1), create(t, ctx, s, 2)
	evs := relayAll(t, ctx, h)
	require.Len(t, evs, 2)
	out, err := deliverytest.Deliver(ctx, s, evs[0].ID, sent.ID, func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, notify.OutcomeSent, out)
	attemptOnce(t, ctx, s, evs[1].ID, 0, failed.ID, notify.AttemptRetry, "421 busy")
	attemptOnce(t, ctx, s, evs[1].ID, 1, failed.ID, notify.AttemptDead, "550 no such user")

	var r settledRecord
	r.Duplicate, err = deliverytest.Deliver(ctx, s, evs[0].ID, sent.ID, func(context.Context) error {
		t.Error("a duplicate was sent")
		return nil
	})
	require.NoError(t, err)
	r.Outbox = h.Count(t, "outbox")
	stats, err := s.OutboxStats(ctx)
	require.NoError(t, err)
	r.DeadLetters = stats.DeadLetters
	require.Equal(t, stats.Unprocessed, stats.UnprocessedStatus, "every request was relayed")
	for _, e := range relayStatus(t, ctx, s) {
		r.Status = append(r.Status, e.Type)
	}
	r.Unprocessed = unprocessed(t, ctx, s)
	r.Notifications, r.Dedup = h.Count(t, "notifications"), h.Count(t, "processed_messages")

	// What the notifications and their attempts say, without ids and
	// times, which are checked here instead.
	r.Sent, r.Failed = get(t, ctx, s, sent.ID), get(t, ctx, s, failed.ID)
	require.NotNil(t, r.Sent.SentAt)
	require.NotNil(t, r.Failed.FailedAt)
	r.SentAtt, r.FailedAtt = h.Attempts(t, sent.ID), h.Attempts(t, failed.ID)
	for _, n := range []*notify.Notification{&r.Sent, &r.Failed} {
		n.ID, n.CreatedAt, n.UpdatedAt, n.SentAt, n.FailedAt = 0, time.Time{}, time.Time{}, nil, nil
	}
	for i, as := range [][]notify.Attempt{r.SentAtt, r.FailedAtt} {
		for j := range as {
			require.Equal(t, evs[i].ID, as[j].MessageID)
			require.NotNil(t, as[j].FinishedAt)
			as[j].MessageID, as[j].StartedAt, as[j].FinishedAt = 0, time.Time{}, nil
		}
	}
	return r
}

// A store opened without status events records a settling exactly as one
// with them, but writes no outbox row for it: the outbox holds the two
// requests only, and there is no status event to relay.
func testNoStatusEvents(t *testing.T, ctx context.Context, h Harness) {
	with := recordHistory(t, ctx, h)
	require.Equal(t, []string{notify.EventSent, notify.EventFailed}, with.Status)
	require.Equal(t, 4, with.Outbox)

	q := h.NoStatusEvents(t)
	without := recordHistory(t, ctx, q)
	require.Empty(t, without.Status, "a status event written without status events")
	require.Equal(t, 2, without.Outbox, "the outbox holds more than the two requests")
	require.Zero(t, without.Unprocessed)

	with.Outbox, with.Status = 0, nil
	without.Outbox, without.Status = 0, nil
	require.Equal(t, with, without, "without status events, the rest of the record differs")
	require.Equal(t, notify.OutcomeDuplicate, without.Duplicate)
	require.Equal(t, notify.StatusSent, without.Sent.Status)
	require.Equal(t, notify.StatusFailed, without.Failed.Status)
	require.Equal(t, "550 no such user", without.Failed.LastError)
	require.Equal(t, []string{notify.AttemptRetry, notify.AttemptDead}, outcomes(without.FailedAtt))
	require.EqualValues(t, 1, without.DeadLetters)
}

// SettleWakes creates a notification on s (migrated, empty), takes the
// wake-up of its create, delivers it, and reports whether the settling
// record woke the store's subscribers: it must exactly when it wrote a
// status event. It is for the engines whose every wake-up comes from this
// process's own commits, at once (SQLite, MongoDB); PostgreSQL's listener
// also wakes on its own, at times no test controls.
func SettleWakes(t *testing.T, s Store) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	wake := s.Subscribe(ctx)
	n := create(t, ctx, s, 1)
	select {
	case <-wake:
	case <-ctx.Done():
		t.Fatal("no wake-up after a create")
	}
	msg := relayOne(t, ctx, s)
	out, err := deliverytest.Deliver(ctx, s, msg, n.ID, func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, notify.OutcomeSent, out)
	select {
	case <-wake:
		return true
	default:
		return false
	}
}
