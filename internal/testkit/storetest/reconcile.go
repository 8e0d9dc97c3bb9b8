package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/deliverytest"
)

// The subtests of the reconciler's store side (guarantee 6).

// relayAll marks every unprocessed outbox row processed, as a relay whose
// broker confirmed everything does, and returns the events.
func relayAll(t *testing.T, ctx context.Context, h Harness) []notify.Event {
	t.Helper()
	return relayed(t, ctx, h.Store, nil, true)
}

// quietBoundary is boundary with margins wide enough for a cut-off given as
// a duration: the store subtracts it from its own clock a moment after the
// test measured it, which moves the cut a little later.
func quietBoundary(t *testing.T) time.Time {
	t.Helper()
	return boundaryWithin(t, 100*time.Millisecond)
}

// A pending notification whose event left the database (relayed) and then
// went quiet gets exactly one fresh event; one with an event still in the
// outbox, one changed after the cut-off, and one dead-lettered get none.
func testReconcile(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	lost := create(t, ctx, s, 1)
	failed := create(t, ctx, s, 2)
	relayAll(t, ctx, h)
	deadLetter(t, ctx, s, 1_000_001, failed, "550 no such user")
	cut := quietBoundary(t)
	young := create(t, ctx, s, 4) // relayed too, but after the cut-off
	relayAll(t, ctx, h)
	waiting := create(t, ctx, s, 3) // its event is still in the outbox

	ids, err := s.Reconcile(ctx, time.Since(cut), 100)
	require.NoError(t, err)
	require.Equal(t, []int64{lost.ID}, ids, "the relayed pending notification is stale at the cut-off; the young one and the dead letter are not")
	require.NotEqual(t, waiting.ID, lost.ID)

	// waiting is stale by now too, but its event is still in the outbox;
	// young has gone quiet for long enough.
	after := quietBoundary(t)
	ids, err = s.Reconcile(ctx, time.Since(after), 100)
	require.NoError(t, err)
	require.Equal(t, []int64{young.ID}, ids, "lost was reconciled once already; waiting has its event in flight")

	// The fresh event is an ordinary notification.requested event for it.
	evs := allEvents(t, ctx, s)
	var fresh []notify.Event
	for _, ev := range evs {
		req, nid, err := notify.Message{ID: ev.ID, Type: ev.Type, Payload: ev.Payload}.Decode()
		require.NoError(t, err)
		if nid == lost.ID {
			require.Equal(t, lost.To, req.To)
			fresh = append(fresh, ev)
		}
	}
	require.Len(t, fresh, 1)

	// Its clock restarted, and it has an event in flight now: a second
	// pass with the same cut-off leaves it alone.
	ids, err = s.Reconcile(ctx, time.Since(after), 100)
	require.NoError(t, err)
	require.Empty(t, ids)
}

// A pass takes at most limit notifications, oldest first.
func testReconcileLimit(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	var ns []notify.Notification
	for i := range 5 {
		ns = append(ns, create(t, ctx, s, i))
	}
	relayAll(t, ctx, h)
	cut := quietBoundary(t)
	first, err := s.Reconcile(ctx, time.Since(cut), 2)
	require.NoError(t, err)
	require.Equal(t, []int64{ns[0].ID, ns[1].ID}, first)
	rest, err := s.Reconcile(ctx, time.Since(cut), 10)
	require.NoError(t, err)
	require.Equal(t, []int64{ns[2].ID, ns[3].ID, ns[4].ID}, rest)
}

// A notification whose retry is scheduled (it waits in a broker's retry
// queue, so no outbox row is in flight) is not stale until its retry is due;
// nor is one a worker holds a live claim on.
func testReconcileWaitsForRetryAndClaim(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	waiting := create(t, ctx, s, 1)
	claimed := create(t, ctx, s, 2)
	evs := relayAll(t, ctx, h)
	require.Len(t, evs, 2)
	msg := func(nid int64) int64 {
		for _, ev := range evs {
			if _, id, err := (notify.Message{ID: ev.ID, Type: ev.Type, Payload: ev.Payload}).Decode(); err == nil && id == nid {
				return ev.ID
			}
		}
		t.Fatalf("no event for notification %d", nid)
		return 0
	}
	c := claim1(t, ctx, s, msg(waiting.ID), waiting.ID, time.Minute)
	require.Equal(t, notify.ClaimTaken, c.Status)
	ok, err := deliverytest.Record(ctx, s, []notify.DeliveryResult{{Claim: c, Outcome: notify.AttemptRetry, Error: "451 later", RetryIn: time.Hour}})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, ok)
	require.Equal(t, notify.ClaimTaken, claim1(t, ctx, s, msg(claimed.ID), claimed.ID, time.Hour).Status)

	ids, err := s.Reconcile(ctx, time.Since(quietBoundary(t)), 100)
	require.NoError(t, err)
	require.Empty(t, ids, "a retry due in an hour and a live claim are events in flight")

	// A negative duration looks into the future: retries due within two
	// hours.
	ids, err = s.Reconcile(ctx, -2*time.Hour, 100)
	require.NoError(t, err)
	require.Equal(t, []int64{waiting.ID}, ids, "once the retry was due long enough, it is reconciled; the claim still holds the other")
}

// A notification to a destination whose failing record a worker wrote
// since the cut-off (an outage under way: its event is parked) is left
// alone; it is reconciled once the record goes.
func testReconcileLeavesFailingDestinations(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	const hook = "https://hooks.example:443"
	c, err := s.Create(ctx, notify.NewNotification{Request: notify.CreateRequest{
		UserID: "user-hook", Channel: "webhook", To: hook + "/in", Body: `{"a":1}`,
	}, Destination: hook})
	require.NoError(t, err)
	other := create(t, ctx, s, 2)
	relayAll(t, ctx, h)
	cut := quietBoundary(t)
	// Reconcile's cut-off is its own clock's now less after, so it falls
	// later than cut by the time from time.Since(cut) to the store's
	// reading of its clock: seconds on a loaded machine (CI, PostgreSQL).
	// The failing record is written well after cut, so that it stays
	// newer than the cut-off however late that falls.
	waitPast(t, cut.Add(2*time.Second))
	_, err = s.DestinationFailing(ctx, "webhook", hook, "dial tcp: connection refused", time.Now())
	require.NoError(t, err)
	ids, err := s.Reconcile(ctx, time.Since(cut), 100)
	require.NoError(t, err)
	require.Equal(t, []int64{other.ID}, ids, "the failing destination's notification is left alone")

	require.NoError(t, s.DestinationUp(ctx, hook))
	ids, err = s.Reconcile(ctx, time.Since(cut), 100)
	require.NoError(t, err)
	require.Equal(t, []int64{c.Notification.ID}, ids, "reconciled once the destination is up")
}

// A failing record nobody wrote since the cut-off was left by workers that
// are gone, or stands for an outage with no parked event (a queue purged
// by hand): it no longer keeps its destination's notifications from the
// reconciler. A disabled record does, however old.
func testReconcileStaleFailingRecord(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	const stale, disabled = "https://stale.example:443", "https://disabled.example:443"
	mk := func(dest string) notify.Created {
		c, err := s.Create(ctx, notify.NewNotification{Request: notify.CreateRequest{
			UserID: "user-hook", Channel: "webhook", To: dest + "/in", Body: `{"a":1}`,
		}, Destination: dest})
		require.NoError(t, err)
		return c
	}
	c := mk(stale)
	mk(disabled)
	relayAll(t, ctx, h)
	for _, dest := range []string{stale, disabled} {
		_, err := s.DestinationFailing(ctx, "webhook", dest, "status 503", time.Now())
		require.NoError(t, err)
	}
	ok, err := s.DisableDestination(ctx, disabled, "failing for too long")
	require.NoError(t, err)
	require.True(t, ok)
	cut := quietBoundary(t)
	ids, err := s.Reconcile(ctx, time.Since(cut), 100)
	require.NoError(t, err)
	require.Equal(t, []int64{c.Notification.ID}, ids, "the stale failing record's notification is reconciled, the disabled one's is not")
}
