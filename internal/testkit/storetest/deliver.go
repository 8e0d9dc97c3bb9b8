package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/deliverytest"
)

// The subtests of the worker's bookkeeping: the claim taken before a send
// and the record written after it.
var deliverTests = []subtest{
	{"ClaimTwiceConcurrently", testClaimTwiceConcurrently},
	{"ClaimOneSendPerNotification", testClaimOneSendPerNotification},
	{"ClaimExpiredLeaseTakenOver", testClaimExpiredLeaseTakenOver},
	{"ClaimAfterSentIsDuplicate", testClaimAfterSentIsDuplicate},
	{"RecordRetryReleasesClaim", testRecordRetryReleasesClaim},
	{"RecordDeferredSpendsNoAttempt", testRecordDeferredSpendsNoAttempt},
	{"RecordDead", testRecordDead},
	{"ClaimMissing", testClaimMissing},
	{"ClaimAndRecordGroups", testClaimAndRecordGroups},
	{"LockOrderNoDeadlock", testLockOrderNoDeadlock},
}

// lease is the lease of claims that must not expire during a subtest.
const lease = time.Minute

func claim1(t *testing.T, ctx context.Context, s Store, msgID, nid int64, lease time.Duration) notify.Claim {
	t.Helper()
	return claimCopy(t, ctx, s, msgID, 0, nid, lease)
}

// claimCopy claims the delivery of msgID that carries retryCount: a retry's
// copy.
func claimCopy(t *testing.T, ctx context.Context, s Store, msgID int64, retryCount int, nid int64, lease time.Duration) notify.Claim {
	t.Helper()
	cs, err := deliverytest.Claim(ctx, s, []notify.ClaimRequest{{MessageID: msgID, NotificationID: nid, RetryCount: retryCount}}, lease)
	require.NoError(t, err)
	require.Len(t, cs, 1)
	require.Equal(t, msgID, cs[0].MessageID)
	require.Equal(t, nid, cs[0].NotificationID)
	require.Equal(t, retryCount, cs[0].RetryCount, "the claim echoes the request's retry count")
	return cs[0]
}

// expiredClaim claims the delivery of msgID that carries retryCount with a
// short lease, requires that it is taken, and waits until the lease has run
// out: the claim of a holder presumed dead.
func expiredClaim(t *testing.T, ctx context.Context, s Store, msgID int64, retryCount int, nid int64) notify.Claim {
	t.Helper()
	c := claimCopy(t, ctx, s, msgID, retryCount, nid, 50*time.Millisecond)
	require.Equal(t, notify.ClaimTaken, c.Status)
	waitPast(t, c.Until.Add(5*time.Millisecond))
	return c
}

func record1(t *testing.T, ctx context.Context, s Store, c notify.Claim, outcome, reason string) bool {
	t.Helper()
	ok, err := deliverytest.Record(ctx, s, []notify.DeliveryResult{{Claim: c, Outcome: outcome, Error: reason}})
	require.NoError(t, err)
	require.Len(t, ok, 1)
	return ok[0]
}

// attemptOnce claims the delivery of msgID that carries retryCount,
// requires that it is taken, and records outcome (with reason) for it, as a
// worker's attempt does; it returns the claim.
func attemptOnce(t *testing.T, ctx context.Context, s Store, msgID int64, retryCount int, nid int64, outcome, reason string) notify.Claim {
	t.Helper()
	c := claimCopy(t, ctx, s, msgID, retryCount, nid, lease)
	require.Equal(t, notify.ClaimTaken, c.Status)
	require.True(t, record1(t, ctx, s, c, outcome, reason))
	return c
}

// recordFailure records a failed attempt of msgID as a worker does: a claim,
// then a retry (or, with dead, a dead) record. A message that cannot be
// claimed (duplicate, missing) records nothing.
func recordFailure(ctx context.Context, s Store, msgID, nid int64, reason string, dead bool) error {
	return recordCopyFailure(ctx, s, notify.ClaimRequest{MessageID: msgID, NotificationID: nid}, reason, dead)
}

// recordCopyFailure is recordFailure for the delivery req names, with its
// retry count.
func recordCopyFailure(ctx context.Context, s Store, req notify.ClaimRequest, reason string, dead bool) error {
	msgID, nid := req.MessageID, req.NotificationID
	cs, err := deliverytest.Claim(ctx, s, []notify.ClaimRequest{req}, lease)
	if err != nil {
		return err
	}
	switch cs[0].Status {
	case notify.ClaimTaken:
	case notify.ClaimBusy:
		return fmt.Errorf("message %d: notification %d busy", msgID, nid)
	default:
		return nil
	}
	outcome := notify.AttemptRetry
	if dead {
		outcome = notify.AttemptDead
	}
	_, err = deliverytest.Record(ctx, s, []notify.DeliveryResult{{Claim: cs[0], Outcome: outcome, Error: reason}})
	return err
}

func get(t *testing.T, ctx context.Context, s Store, id int64) notify.Notification {
	t.Helper()
	n, err := s.Get(ctx, id)
	require.NoError(t, err)
	return n
}

// outcomes lists the attempts' outcomes ("" while in flight).
func outcomes(as []notify.Attempt) []string {
	return pluck(as, func(a notify.Attempt) string { return a.Outcome })
}

// Two deliveries of one message claim it at once: one gets the claim, the
// other is told busy; neither waits for the other's send.
func testClaimTwiceConcurrently(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	for i := range 10 {
		n := create(t, ctx, s, i)
		msg := int64(100 + i)
		got := make([]notify.Claim, 2)
		errs := make([]error, 2)
		together(2, func(w int) {
			var cs []notify.Claim
			cs, errs[w] = deliverytest.Claim(ctx, s, []notify.ClaimRequest{{MessageID: msg, NotificationID: n.ID}}, lease)
			if len(cs) == 1 {
				got[w] = cs[0]
			}
		})
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])
		statuses := []notify.ClaimStatus{got[0].Status, got[1].Status}
		require.ElementsMatch(t, []notify.ClaimStatus{notify.ClaimTaken, notify.ClaimBusy}, statuses)
		taken := got[0]
		if taken.Status != notify.ClaimTaken {
			taken = got[1]
		}
		require.Positive(t, taken.AttemptID)
		require.Equal(t, 1, taken.Attempt)
		require.WithinDuration(t, time.Now().Add(lease), taken.Until, 10*time.Second)
		as := h.Attempts(t, n.ID)
		require.Len(t, as, 1, "one attempt row per claim taken")
		require.Equal(t, msg, as[0].MessageID)
		require.Nil(t, as[0].FinishedAt, "in flight")
		require.Empty(t, as[0].Outcome)
	}
}

// The claim holds the notification, not only the message id: a second
// message for it (a reconciled or redriven event) is busy while a send is
// in flight, and a duplicate once the notification is sent.
func testClaimOneSendPerNotification(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	c := claim1(t, ctx, s, 1, n.ID, lease)
	require.Equal(t, notify.ClaimTaken, c.Status)
	require.Equal(t, notify.ClaimBusy, claim1(t, ctx, s, 2, n.ID, lease).Status)
	require.True(t, record1(t, ctx, s, c, notify.AttemptSent, ""))
	require.Equal(t, notify.ClaimDuplicate, claim1(t, ctx, s, 2, n.ID, lease).Status)
	require.Equal(t, notify.ClaimDuplicate, claim1(t, ctx, s, 3, n.ID, lease).Status)
	got := get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusSent, got.Status)
	require.Equal(t, 1, got.Attempts)
	require.Len(t, h.Attempts(t, n.ID), 1)
}

// A lease that ran out is taken over (its holder is presumed dead between
// send and record), and the stale holder's late record changes nothing.
func testClaimExpiredLeaseTakenOver(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	stale := expiredClaim(t, ctx, s, 7, 0, n.ID)

	// The same message comes again (the broker redelivered it).
	fresh := claim1(t, ctx, s, 7, n.ID, lease)
	require.Equal(t, notify.ClaimTaken, fresh.Status)
	require.NotEqual(t, stale.AttemptID, fresh.AttemptID)
	require.Equal(t, 2, fresh.Attempt)

	// The stale holder wakes up and records; it must not overwrite the
	// fresh holder's claim nor settle the notification under it.
	require.False(t, record1(t, ctx, s, stale, notify.AttemptSent, ""))
	got := get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusPending, got.Status)
	require.Zero(t, got.Attempts)
	require.Equal(t, notify.ClaimBusy, claim1(t, ctx, s, 7, n.ID, lease).Status, "the fresh claim still holds")
	require.False(t, record1(t, ctx, s, stale, notify.AttemptRetry, "late"))

	require.True(t, record1(t, ctx, s, fresh, notify.AttemptSent, ""))
	got = get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusSent, got.Status)
	require.Equal(t, 1, got.Attempts)
	require.Equal(t, 1, h.Count(t, "processed_messages"))
	as := h.Attempts(t, n.ID)
	require.Equal(t, []string{notify.AttemptSent, notify.AttemptSent}, outcomes(as), "both sends are history")
	require.Equal(t, []int{1, 2}, []int{as[0].Attempt, as[1].Attempt})

	// A takeover by another message of the notification drops the dead
	// holder's lease row, so nothing is left claimed.
	m := create(t, ctx, s, 2)
	expiredClaim(t, ctx, s, 20, 0, m.ID)
	attemptOnce(t, ctx, s, 21, 0, m.ID, notify.AttemptSent, "")
	require.Equal(t, 2, h.Count(t, "processed_messages"), "message 20's lease row is gone, 21 is done")
	require.Equal(t, notify.ClaimDuplicate, claim1(t, ctx, s, 20, m.ID, lease).Status)
}

func testClaimAfterSentIsDuplicate(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	c := attemptOnce(t, ctx, s, 5, 0, n.ID, notify.AttemptSent, "")
	got := get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusSent, got.Status)
	require.NotNil(t, got.SentAt)
	require.Equal(t, 1, got.Attempts)

	again := claim1(t, ctx, s, 5, n.ID, lease)
	require.Equal(t, notify.ClaimDuplicate, again.Status)
	require.Zero(t, again.AttemptID)
	require.False(t, record1(t, ctx, s, c, notify.AttemptSent, ""), "a second record of a settled claim")
	require.Equal(t, get(t, ctx, s, n.ID), got, "nothing changed")
	as := h.Attempts(t, n.ID)
	require.Len(t, as, 1)
	require.Equal(t, notify.AttemptSent, as[0].Outcome)
	require.NotNil(t, as[0].FinishedAt)
	require.Empty(t, as[0].Error)
}

// A transient failure spends an attempt and releases the claim: the retried
// copy, with the same message id and the next retry count, claims it again.
func testRecordRetryReleasesClaim(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	attemptOnce(t, ctx, s, 9, 0, n.ID, notify.AttemptRetry, "451 try later")
	got := get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusPending, got.Status)
	require.Equal(t, 1, got.Attempts)
	require.Equal(t, "451 try later", got.LastError)
	require.Equal(t, 1, h.Count(t, "processed_messages"), "released, not done: the row keeps the retry mark")

	retry := claimCopy(t, ctx, s, 9, 1, n.ID, lease)
	require.Equal(t, notify.ClaimTaken, retry.Status)
	require.Equal(t, 2, retry.Attempt)
	require.True(t, record1(t, ctx, s, retry, notify.AttemptSent, ""))
	got = get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusSent, got.Status)
	require.Equal(t, 2, got.Attempts)
	as := h.Attempts(t, n.ID)
	require.Equal(t, []string{notify.AttemptRetry, notify.AttemptSent}, outcomes(as))
	require.Equal(t, "451 try later", as[0].Error)
}

// The mail server was down: the claim is released and no attempt spent.
func testRecordDeferredSpendsNoAttempt(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	for range 3 {
		attemptOnce(t, ctx, s, 4, 0, n.ID, notify.AttemptDeferred, "dial: connection refused")
	}
	got := get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusPending, got.Status)
	require.Zero(t, got.Attempts)
	require.Empty(t, got.LastError)
	require.Zero(t, h.Count(t, "processed_messages"))
	attemptOnce(t, ctx, s, 4, 0, n.ID, notify.AttemptSent, "")
	got = get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusSent, got.Status)
	require.Equal(t, 1, got.Attempts)
	require.Equal(t, []string{notify.AttemptDeferred, notify.AttemptDeferred, notify.AttemptDeferred, notify.AttemptSent},
		outcomes(h.Attempts(t, n.ID)))
}

func testRecordDead(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	attemptOnce(t, ctx, s, 3, 0, n.ID, notify.AttemptDead, "550 no such mailbox")
	got := get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusFailed, got.Status)
	require.Equal(t, 1, got.Attempts)
	require.Equal(t, "550 no such mailbox", got.LastError)
	require.NotNil(t, got.FailedAt)
	require.Nil(t, got.SentAt)
	require.Equal(t, 1, h.Count(t, "processed_messages"))
	require.Equal(t, notify.ClaimDuplicate, claim1(t, ctx, s, 3, n.ID, lease).Status)
	require.Equal(t, []string{notify.AttemptDead}, outcomes(h.Attempts(t, n.ID)))
}

func testClaimMissing(t *testing.T, ctx context.Context, h Harness) {
	c := claim1(t, ctx, h.Store, 8, 987654, lease)
	require.Equal(t, notify.ClaimMissing, c.Status)
	require.Zero(t, c.AttemptID)
	require.Equal(t, 1, h.Count(t, "processed_messages"), "the message is settled")
	require.Empty(t, h.Attempts(t, 987654))
}

// Many claims and records in one call: each answered in order, copies of one
// message or notification within the group answered busy.
func testClaimAndRecordGroups(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	var ns []notify.Notification
	for i := range 4 {
		ns = append(ns, create(t, ctx, s, i))
	}
	sent := attemptOnce(t, ctx, s, 30, 0, ns[3].ID, notify.AttemptSent, "")

	reqs := []notify.ClaimRequest{
		{MessageID: 12, NotificationID: ns[2].ID},
		{MessageID: 10, NotificationID: ns[0].ID},
		{MessageID: 10, NotificationID: ns[0].ID}, // a copy in the same group
		{MessageID: 11, NotificationID: ns[1].ID},
		{MessageID: 13, NotificationID: ns[1].ID}, // another message, same notification
		{MessageID: 30, NotificationID: ns[3].ID}, // done
		{MessageID: 31, NotificationID: 777777},   // missing
	}
	cs, err := deliverytest.Claim(ctx, s, reqs, lease)
	require.NoError(t, err)
	require.Len(t, cs, len(reqs))
	want := []notify.ClaimStatus{notify.ClaimTaken, notify.ClaimTaken, notify.ClaimBusy, notify.ClaimTaken,
		notify.ClaimBusy, notify.ClaimDuplicate, notify.ClaimMissing}
	for i, c := range cs {
		require.Equal(t, reqs[i].MessageID, c.MessageID, "answer %d", i)
		require.Equal(t, want[i], c.Status, "answer %d", i)
	}

	results := []notify.DeliveryResult{
		{Claim: cs[0], Outcome: notify.AttemptDead, Error: "550 gone"},
		{Claim: cs[1], Outcome: notify.AttemptSent},
		{Claim: cs[3], Outcome: notify.AttemptRetry, Error: "451 later"},
		{Claim: sent, Outcome: notify.AttemptSent}, // settled already
	}
	ok, err := deliverytest.Record(ctx, s, results)
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, true, false}, ok)
	require.Equal(t, notify.StatusFailed, get(t, ctx, s, ns[2].ID).Status)
	require.Equal(t, notify.StatusSent, get(t, ctx, s, ns[0].ID).Status)
	retried := get(t, ctx, s, ns[1].ID)
	require.Equal(t, notify.StatusPending, retried.Status)
	require.Equal(t, 1, retried.Attempts)
	require.Equal(t, notify.StatusSent, get(t, ctx, s, ns[3].ID).Status)
	require.Equal(t, 1, get(t, ctx, s, ns[3].ID).Attempts)
}

// Lock order: a claim of a message and a dead record of another copy of it,
// and groups that name the same notifications in opposite orders, race many
// times; none ends in a deadlock (or any other) error.
func testLockOrderNoDeadlock(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	const rounds = 30
	for r := range rounds {
		a, b := create(t, ctx, s, 2*r), create(t, ctx, s, 2*r+1)
		ma, mb := int64(1000+2*r), int64(1001+2*r)
		held, err := deliverytest.Claim(ctx, s, []notify.ClaimRequest{{MessageID: ma, NotificationID: a.ID}, {MessageID: mb, NotificationID: b.ID}}, 10*time.Millisecond)
		require.NoError(t, err)
		waitPast(t, held[1].Until.Add(2*time.Millisecond))
		racers := []func() error{
			// The holder records both dead, in one group, b before a.
			func() error {
				_, err := deliverytest.Record(ctx, s, []notify.DeliveryResult{
					{Claim: held[1], Outcome: notify.AttemptDead, Error: "550"},
					{Claim: held[0], Outcome: notify.AttemptDead, Error: "550"},
				})

				return err
			},
			// Copies of both messages are claimed (the leases ran out) in
			// the other order, and one by one.
			func() error {
				_, err := deliverytest.Claim(ctx, s, []notify.ClaimRequest{{MessageID: ma, NotificationID: a.ID}, {MessageID: mb, NotificationID: b.ID}}, lease)
				return err
			},
			func() error {
				_, err := deliverytest.Claim(ctx, s, []notify.ClaimRequest{{MessageID: mb, NotificationID: b.ID}}, lease)
				return err
			},
			func() error {
				cs, err := deliverytest.Claim(ctx, s, []notify.ClaimRequest{{MessageID: ma, NotificationID: a.ID}}, lease)
				if err != nil || cs[0].Status != notify.ClaimTaken {
					return err
				}
				_, err = deliverytest.Record(ctx, s, []notify.DeliveryResult{{Claim: cs[0], Outcome: notify.AttemptDead, Error: "550"}})
				return err
			},
		}
		errs := make([]error, len(racers))
		together(len(racers), func(i int) { errs[i] = racers[i]() })
		for _, err := range errs {
			require.NoError(t, err, "round %d", r)
		}
		// Whoever won, each notification is settled or claimed by exactly
		// one holder: at most one attempt row is open.
		for _, n := range []notify.Notification{a, b} {
			open := 0
			for _, at := range h.Attempts(t, n.ID) {
				if at.FinishedAt == nil {
					open++
				}
			}
			require.LessOrEqual(t, open, 1, "round %d: open attempts of notification %d", r, n.ID)
		}
	}
}
