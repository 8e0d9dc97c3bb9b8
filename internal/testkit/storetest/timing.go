package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/testkit/deliverytest"
)

// timingTests are the subtests of issue 34: send_at (scheduled), cancel and
// expires_at.
var timingTests = []subtest{
	{"ScheduledNotBeforeSendAt", testScheduledNotBeforeSendAt},
	{"ScheduledInThePastIsDue", testScheduledInThePastIsDue},
	{"ScheduledIdempotency", testScheduledIdempotency},
	{"CancelScheduled", testCancelScheduled},
	{"CancelThenClaim", testCancelThenClaim},
	{"CancelRacesClaim", testCancelRacesClaim},
	{"ExpiredAtClaim", testExpiredAtClaim},
	{"ExpiredRetryNotSent", testExpiredRetryNotSent},
	{"BatchKeepsTiming", testBatchKeepsTiming},
}

// statusEvents relays the status events and returns them decoded.
func statusEvents(t *testing.T, ctx context.Context, s Store) []notify.StatusEvent {
	t.Helper()
	var out []notify.StatusEvent
	for _, e := range relayStatus(t, ctx, s) {
		st, err := notify.DecodeStatus(e.Payload)
		require.NoError(t, err)
		require.Equal(t, e.Type, "notification."+st.Status)
		out = append(out, st)
	}
	return out
}

// createTimed creates request(i) with send_at and expires_at.
func createTimed(t *testing.T, ctx context.Context, s Store, i int, sendAt, expiresAt *time.Time) notify.Notification {
	t.Helper()
	r := request(i)
	r.SendAt, r.ExpiresAt = sendAt, expiresAt
	return createNew(t, ctx, s, notify.NewNotification{Request: r})
}

func ptr(t time.Time) *time.Time { return &t }

// relayIDs relays what a relay of types may take now, confirming all of
// it, and returns the notification ids.
func relayIDs(t *testing.T, ctx context.Context, s Store, types []string) []int64 {
	t.Helper()
	var out []int64
	for _, e := range relayed(t, ctx, s, types, true) {
		if e.Type == notify.EventRequested {
			_, id, err := notify.Message{ID: e.ID, Type: e.Type, Payload: e.Payload}.Decode()
			require.NoError(t, err)
			out = append(out, id)
		}
	}
	return out
}

// testScheduledNotBeforeSendAt: a notification with a send_at ahead is
// kept pending with its send_at (shown scheduled), listed under
// status=scheduled and not under pending; neither a relay (of every type,
// or of the notifications) nor the table claim takes its event before
// send_at, while they take the others; once send_at passes, each takes it.
func testScheduledNotBeforeSendAt(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	sendAt := time.Now().Add(1500 * time.Millisecond).UTC()
	sched := createTimed(t, ctx, s, 1, ptr(sendAt), nil)
	now := create(t, ctx, s, 2)
	require.NotNil(t, sched.SendAt)
	require.WithinDuration(t, sendAt, *sched.SendAt, time.Millisecond)

	got := get(t, ctx, s, sched.ID)
	require.Equal(t, notify.StatusPending, got.Status, "stored pending")
	require.NotNil(t, got.SendAt)
	require.WithinDuration(t, sendAt, *got.SendAt, time.Millisecond)
	require.Nil(t, got.ExpiresAt)
	require.Equal(t, notify.StatusScheduled, got.StatusAt(time.Now()))

	list := func(st notify.Status) []int64 {
		p, err := s.List(ctx, notify.ListFilter{Status: st, Limit: 10})
		require.NoError(t, err)
		var out []int64
		for _, n := range p.Items {
			out = append(out, n.ID)
		}
		return out
	}
	require.Equal(t, []int64{sched.ID}, list(notify.StatusScheduled))
	require.Equal(t, []int64{now.ID}, list(notify.StatusPending))

	// Before send_at: the relays and the claim see only the other one.
	require.Equal(t, []int64{now.ID}, relayIDs(t, ctx, s, nil))
	require.Empty(t, relayIDs(t, ctx, s, requestedOnly))
	claimed, err := s.Claim(ctx, "w", 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, claimed, "the table claim took a row before its send_at")
	require.True(t, time.Now().Before(sendAt), "the checks above ran too late to mean anything; the machine is too slow")

	// Once due, the claim (here, as the table transport) takes it.
	deadline := time.Now().Add(wait)
	for {
		claimed, err = s.Claim(ctx, "w", 10, time.Minute)
		require.NoError(t, err)
		if len(claimed) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Len(t, claimed, 1)
	require.False(t, time.Now().Before(sendAt), "claimed before send_at")
	require.ElementsMatch(t, []int64{sched.ID, now.ID}, list(notify.StatusPending))
	require.Empty(t, list(notify.StatusScheduled))
}

// testScheduledInThePastIsDue: a send_at in the past is due at once, for
// a relay and for the claim.
func testScheduledInThePastIsDue(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	past := time.Now().Add(-time.Hour).UTC()
	a := createTimed(t, ctx, s, 1, ptr(past), nil)
	b := createTimed(t, ctx, s, 2, ptr(past), nil)
	got := get(t, ctx, s, a.ID)
	require.Equal(t, notify.StatusPending, got.StatusAt(time.Now()))
	claimed, err := s.Claim(ctx, "w", 10, time.Minute)
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{a.ID, b.ID}, claimedIDs(t, claimed), "due at once")
	c := createTimed(t, ctx, s, 3, ptr(past), nil)
	require.Equal(t, []int64{c.ID}, relayIDs(t, ctx, s, nil), "due at once")
}

// testScheduledIdempotency: a create repeated with its idempotency key
// and the same send_at is a replay; with another send_at or expires_at it
// is a conflict.
func testScheduledIdempotency(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	sendAt := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	r := request(1)
	r.SendAt = ptr(sendAt)
	first, err := s.Create(ctx, notify.NewNotification{Request: r, IdempotencyKey: "k"})
	require.NoError(t, err)
	again, err := s.Create(ctx, notify.NewNotification{Request: r, IdempotencyKey: "k"})
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, first.Notification.ID, again.Notification.ID)
	other := r
	other.SendAt = ptr(sendAt.Add(time.Minute))
	_, err = s.Create(ctx, notify.NewNotification{Request: other, IdempotencyKey: "k"})
	require.ErrorIs(t, err, notify.ErrConflict)
	other = r
	other.ExpiresAt = ptr(sendAt.Add(time.Hour))
	_, err = s.Create(ctx, notify.NewNotification{Request: other, IdempotencyKey: "k"})
	require.ErrorIs(t, err, notify.ErrConflict)
	require.Equal(t, 1, h.Count(t, "notifications"))
}

// testCancelScheduled: a scheduled notification is canceled with its
// status event, in one go; its notification.requested event is settled
// with it (no relay or claim takes it, the backlog is only the status
// event); a second cancel answers the same without a second event; an
// unknown id is ErrNotFound.
func testCancelScheduled(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := createTimed(t, ctx, s, 1, ptr(time.Now().Add(time.Hour)), nil)
	c, err := s.Cancel(ctx, n.ID)
	require.NoError(t, err)
	require.Equal(t, notify.StatusCanceled, c.Status)
	require.NotNil(t, c.CanceledAt)
	got := get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusCanceled, got.StatusAt(time.Now()))
	require.NotNil(t, got.CanceledAt)
	require.EqualValues(t, 1, unprocessed(t, ctx, s), "only the status event is left")
	evs := statusEvents(t, ctx, s)
	require.Len(t, evs, 1)
	require.Equal(t, notify.FormatID(n.ID), evs[0].NotificationID)
	require.Equal(t, "canceled", evs[0].Status)
	require.Empty(t, relayIDs(t, ctx, s, nil))
	claimed, err := s.Claim(ctx, "w", 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, claimed)

	again, err := s.Cancel(ctx, n.ID)
	require.NoError(t, err, "a cancel is idempotent")
	require.Equal(t, notify.StatusCanceled, again.Status)
	require.Empty(t, statusEvents(t, ctx, s), "no second status event")
	_, err = s.Cancel(ctx, 1<<40)
	require.ErrorIs(t, err, notify.ErrNotFound)
}

// testCancelThenClaim: a notification whose event is already out (in a
// broker) is canceled; the worker's claim of that event then answers
// duplicate: no attempt, no send.
func testCancelThenClaim(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	msg := relayOne(t, ctx, s)
	_, err := s.Cancel(ctx, n.ID)
	require.NoError(t, err)
	cs, err := deliverytest.Claim(ctx, s, []notify.ClaimRequest{{MessageID: msg, NotificationID: n.ID}}, lease)
	require.NoError(t, err)
	require.Len(t, cs, 1)
	require.Equal(t, notify.ClaimDuplicate, cs[0].Status, "a canceled notification is never claimed")
	require.Empty(t, h.Attempts(t, n.ID))
}

// testCancelRacesClaim: a cancel and a claim of the same notification,
// concurrently, many times: either the cancel wins (200: the claim answers
// duplicate and nothing is sent) or the claim does (the cancel answers
// ErrSendInProgress, the send goes on and is recorded; a cancel after that
// is ErrNotCancelable). Never both.
func testCancelRacesClaim(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	// In order first: a claim taken holds off the cancel until its record;
	// a deferral (the send did not happen) releases it, and the cancel
	// then wins.
	n := create(t, ctx, s, 100)
	held := claim1(t, ctx, s, allEvents(t, ctx, s)[0].ID, n.ID, lease)
	require.Equal(t, notify.ClaimTaken, held.Status)
	_, err := s.Cancel(ctx, n.ID)
	require.ErrorIs(t, err, notify.ErrSendInProgress)
	_, err = deliverytest.Record(ctx, s, []notify.DeliveryResult{{Claim: held, Outcome: notify.AttemptDeferred, Error: "provider down"}})
	require.NoError(t, err)
	c, err := s.Cancel(ctx, n.ID)
	require.NoError(t, err)
	require.Equal(t, notify.StatusCanceled, c.Status)

	var canceled, sent int
	for i := range 20 {
		n := create(t, ctx, s, i)
		var msg int64
		_, err := relay.Batch(ctx, s, 10, requestedOnly, func(_ context.Context, evs []notify.Event) ([]int64, error) {
			msg = evs[0].ID
			return ids(evs), nil
		})

		require.NoError(t, err)
		var (
			wg        sync.WaitGroup
			cs        []notify.Claim
			claimErr  error
			cancelErr error
		)
		wg.Add(2)
		go func() {
			defer wg.Done()
			cs, claimErr = deliverytest.Claim(ctx, s, []notify.ClaimRequest{{MessageID: msg, NotificationID: n.ID}}, lease)
		}()
		go func() {
			defer wg.Done()
			_, cancelErr = s.Cancel(ctx, n.ID)
		}()
		wg.Wait()
		require.NoError(t, claimErr)
		require.Len(t, cs, 1)
		switch {
		case cancelErr == nil:
			canceled++
			require.Equal(t, notify.ClaimDuplicate, cs[0].Status, "canceled, yet claimed for a send")
		default:
			require.ErrorIs(t, cancelErr, notify.ErrSendInProgress)
			require.Equal(t, notify.ClaimTaken, cs[0].Status)
			sent++
			require.True(t, record1(t, ctx, s, cs[0], notify.AttemptSent, ""))
			_, err := s.Cancel(ctx, n.ID)
			require.ErrorIs(t, err, notify.ErrNotCancelable)
		}
		got := get(t, ctx, s, n.ID)
		require.Contains(t, []notify.Status{notify.StatusCanceled, notify.StatusSent}, got.Status)
	}
	t.Logf("cancel won %d races, the claim %d", canceled, sent)
}

// testExpiredAtClaim: a claim of a notification past its expires_at takes
// nothing: it answers duplicate, ends the notification expired with its
// status event, and starts no attempt; a later copy is a duplicate too; an
// expired notification cannot be canceled.
func testExpiredAtClaim(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := createTimed(t, ctx, s, 1, nil, ptr(time.Now().Add(-time.Second)))
	msg := allEvents(t, ctx, s)[0].ID
	cs, err := deliverytest.Claim(ctx, s, []notify.ClaimRequest{{MessageID: msg, NotificationID: n.ID}}, lease)
	require.NoError(t, err)
	require.Equal(t, notify.ClaimDuplicate, cs[0].Status)
	got := get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusExpired, got.Status)
	require.NotNil(t, got.ExpiredAt)
	require.Empty(t, h.Attempts(t, n.ID), "no attempt started")
	evs := statusEvents(t, ctx, s)
	require.Len(t, evs, 1)
	require.Equal(t, "expired", evs[0].Status)
	require.Equal(t, notify.FormatID(n.ID), evs[0].NotificationID)
	cs, err = deliverytest.Claim(ctx, s, []notify.ClaimRequest{{MessageID: msg, NotificationID: n.ID, RetryCount: 1}}, lease)
	require.NoError(t, err)
	require.Equal(t, notify.ClaimDuplicate, cs[0].Status)
	_, err = s.Cancel(ctx, n.ID)
	require.ErrorIs(t, err, notify.ErrNotCancelable)
	require.Empty(t, statusEvents(t, ctx, s), "one status event")
}

// testExpiredRetryNotSent: a delivery retried (or parked) across its
// notification's expires_at is not sent late: the retry's claim ends it
// expired.
func testExpiredRetryNotSent(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	// Long enough for the first claim and record to come before it on a
	// loaded machine (300 ms did not, on FerretDB beside the whole suite).
	expires := time.Now().Add(3 * time.Second)
	n := createTimed(t, ctx, s, 1, nil, ptr(expires))
	msg := allEvents(t, ctx, s)[0].ID
	attemptOnce(t, ctx, s, msg, 0, n.ID, notify.AttemptRetry, "451 try later")
	require.True(t, time.Now().Before(expires), "the first attempt ended after expires_at: the machine is too slow for this test to mean anything")
	for time.Now().Before(expires.Add(10 * time.Millisecond)) {
		time.Sleep(10 * time.Millisecond)
	}
	cs, err := deliverytest.Claim(ctx, s, []notify.ClaimRequest{{MessageID: msg, NotificationID: n.ID, RetryCount: 1}}, lease)
	require.NoError(t, err)
	require.Equal(t, notify.ClaimDuplicate, cs[0].Status, "the retry started after expires_at")
	got := get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusExpired, got.Status)
	require.Equal(t, 1, got.Attempts, "the one attempt before the expiry")
	require.Len(t, h.Attempts(t, n.ID), 1)
}

// testBatchKeepsTiming: a batch's timed request (send_at, expires_at),
// amid untimed ones that may be written together, keeps both times, and
// its event is not relayed before its send_at.
func testBatchKeepsTiming(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	sendAt := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	expiresAt := sendAt.Add(time.Hour)
	nns := batchOf(1, 3)
	nns[1].Request.SendAt, nns[1].Request.ExpiresAt = ptr(sendAt), ptr(expiresAt)
	out, err := s.CreateBatch(ctx, nns)
	require.NoError(t, err)
	require.Len(t, out, 3)
	for i, r := range out {
		require.NoError(t, r.Err, "request %d", i)
	}
	timed := out[1].Created.Notification
	got := get(t, ctx, s, timed.ID)
	require.NotNil(t, got.SendAt, "the batch dropped send_at")
	require.WithinDuration(t, sendAt, *got.SendAt, time.Millisecond)
	require.NotNil(t, got.ExpiresAt, "the batch dropped expires_at")
	require.WithinDuration(t, expiresAt, *got.ExpiresAt, time.Millisecond)
	require.Equal(t, notify.StatusScheduled, got.StatusAt(time.Now()))
	require.ElementsMatch(t, []int64{out[0].Created.Notification.ID, out[2].Created.Notification.ID}, relayIDs(t, ctx, s, nil),
		"a relay took the scheduled request's event before its send_at")
}
