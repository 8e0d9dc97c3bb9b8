package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/deliverytest"
)

// The subtests of the stale-copy guard. A message and its retry copies share
// one message id; once the retry of the delivery with retry count k is
// recorded, a delivery of that id with count k or less is a stale copy (a
// broker redelivered the original after the retry's copy was published):
// it is answered duplicate, sends nothing and spends no attempt, and the
// retry's copy is claimed as usual.
var staleCopyTests = []subtest{
	{"StaleCopyAfterRetry", testStaleCopyAfterRetry},
	{"StaleCopyConcurrent", testStaleCopyConcurrent},
	{"StaleCopyInOneGroup", testStaleCopyInOneGroup},
	{"StaleCopyMarkSurvivesRelease", testStaleCopyMarkSurvivesRelease},
	{"StaleCopyLostRetryReconciled", testStaleCopyLostRetryReconciled},
	{"StaleCopyRedrive", testStaleCopyRedrive},
}

func testStaleCopyAfterRetry(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	const msg = 40
	first := attemptOnce(t, ctx, s, msg, 0, n.ID, notify.AttemptRetry, "451 later")

	// The original comes again (its partition's new owner redelivers it):
	// stale, nothing claimed, no attempt row.
	stale := claimCopy(t, ctx, s, msg, 0, n.ID, lease)
	require.Equal(t, notify.ClaimDuplicate, stale.Status)
	require.Zero(t, stale.AttemptID)
	require.Zero(t, stale.Attempt)
	require.Len(t, h.Attempts(t, n.ID), 1, "a stale copy starts no attempt")
	got := get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusPending, got.Status)
	require.Equal(t, 1, got.Attempts)

	// The stale answer did not settle the message id: the retry's copy is
	// claimed; a second copy with the same count is busy meanwhile, and the
	// stale original is still refused.
	copy1 := claimCopy(t, ctx, s, msg, 1, n.ID, lease)
	require.Equal(t, notify.ClaimTaken, copy1.Status)
	require.Equal(t, 2, copy1.Attempt)
	require.Equal(t, notify.ClaimBusy, claimCopy(t, ctx, s, msg, 1, n.ID, lease).Status)
	require.Equal(t, notify.ClaimDuplicate, claimCopy(t, ctx, s, msg, 0, n.ID, lease).Status)

	// The copy fails too: now copy 1 is stale and copy 2 carries on.
	require.True(t, record1(t, ctx, s, copy1, notify.AttemptRetry, "451 still later"))
	require.Equal(t, notify.ClaimDuplicate, claimCopy(t, ctx, s, msg, 1, n.ID, lease).Status)
	require.Equal(t, notify.ClaimDuplicate, claimCopy(t, ctx, s, msg, 0, n.ID, lease).Status)
	copy2 := claimCopy(t, ctx, s, msg, 2, n.ID, lease)
	require.Equal(t, notify.ClaimTaken, copy2.Status)
	require.Equal(t, 3, copy2.Attempt)
	require.True(t, record1(t, ctx, s, copy2, notify.AttemptSent, ""))

	got = get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusSent, got.Status)
	require.Equal(t, 3, got.Attempts, "one attempt per delivery of the chain, none for the stale copies")
	require.Equal(t, []string{notify.AttemptRetry, notify.AttemptRetry, notify.AttemptSent}, outcomes(h.Attempts(t, n.ID)))
	require.Equal(t, notify.ClaimDuplicate, claimCopy(t, ctx, s, msg, 2, n.ID, lease).Status, "a copy of a sent message")
	require.Equal(t, 1, h.Count(t, "processed_messages"))

	// A late record of the first claim (its holder lost it) neither
	// changes the notification nor lowers the mark.
	require.False(t, record1(t, ctx, s, first, notify.AttemptRetry, "late"))

	// Another notification's first delivery is not touched by the mark of
	// message 40.
	m := create(t, ctx, s, 2)
	require.Equal(t, notify.ClaimTaken, claimCopy(t, ctx, s, 41, 0, m.ID, lease).Status)
}

// Stale originals and copies of one message race after a retry: exactly one
// copy with the expected count is taken; every stale one is a duplicate, the
// other copies busy. No stale one sends.
func testStaleCopyConcurrent(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	const msg = 60
	attemptOnce(t, ctx, s, msg, 0, n.ID, notify.AttemptRetry, "451 later")

	const each = 4
	counts := make([]int, 0, 2*each)
	for range each {
		counts = append(counts, 0, 1)
	}
	answers := make([]notify.Claim, len(counts))
	errs := make([]error, len(counts))
	together(len(counts), func(i int) {
		var cs []notify.Claim
		cs, errs[i] = deliverytest.Claim(ctx, s, []notify.ClaimRequest{{MessageID: msg, NotificationID: n.ID, RetryCount: counts[i]}}, lease)
		if errs[i] == nil {
			answers[i] = cs[0]
		}
	})
	taken := 0
	for i, c := range answers {
		require.NoError(t, errs[i])
		switch counts[i] {
		case 0:
			require.Equal(t, notify.ClaimDuplicate, c.Status, "a stale original, answer %d", i)
		default:
			require.Contains(t, []notify.ClaimStatus{notify.ClaimTaken, notify.ClaimBusy}, c.Status, "a copy, answer %d", i)
			if c.Status == notify.ClaimTaken {
				taken++
				require.Equal(t, 2, c.Attempt)
			}
		}
	}
	require.Equal(t, 1, taken, "exactly one copy is taken")
	require.Len(t, h.Attempts(t, n.ID), 2)
}

// A retry recorded and a stale copy claimed in one group (the worker's
// grouped bookkeeping): the record comes first, and the stale copy is
// refused; another notification's claim in the group is taken.
func testStaleCopyInOneGroup(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n, other := create(t, ctx, s, 1), create(t, ctx, s, 2)
	first := claimCopy(t, ctx, s, 70, 0, n.ID, lease)
	require.Equal(t, notify.ClaimTaken, first.Status)
	cs, ok, err := s.ClaimAndRecord(ctx, []notify.ClaimRequest{
		{MessageID: 71, NotificationID: other.ID},
		{MessageID: 70, NotificationID: n.ID},
	}, lease, []notify.DeliveryResult{{Claim: first, Outcome: notify.AttemptRetry, Error: "451 later"}})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, ok)
	require.Equal(t, notify.ClaimTaken, cs[0].Status)
	require.Equal(t, notify.ClaimDuplicate, cs[1].Status, "the original, stale once its retry is recorded")
	require.Len(t, h.Attempts(t, n.ID), 1)
	require.Equal(t, notify.ClaimTaken, claimCopy(t, ctx, s, 70, 1, n.ID, lease).Status)
}

// The mark stays when the copy's claim is released without a retry (the
// mail server was down: deferred) and when another message of the
// notification takes over the copy's expired claim.
func testStaleCopyMarkSurvivesRelease(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	const msg = 50
	attemptOnce(t, ctx, s, msg, 0, n.ID, notify.AttemptRetry, "451 later")

	attemptOnce(t, ctx, s, msg, 1, n.ID, notify.AttemptDeferred, "dial: connection refused")
	require.Equal(t, notify.ClaimDuplicate, claimCopy(t, ctx, s, msg, 0, n.ID, lease).Status, "after a deferred release")

	expiredClaim(t, ctx, s, msg, 1, n.ID)
	// A reconciled event (another message id) takes the expired claim over.
	attemptOnce(t, ctx, s, 51, 0, n.ID, notify.AttemptDeferred, "dial: connection refused")
	require.Equal(t, notify.ClaimDuplicate, claimCopy(t, ctx, s, msg, 0, n.ID, lease).Status, "after a takeover")
	require.Equal(t, 1, h.Count(t, "processed_messages"), "message 50's mark; 51's deferred row is gone")

	attemptOnce(t, ctx, s, msg, 1, n.ID, notify.AttemptSent, "")
	got := get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusSent, got.Status)
	require.Equal(t, 2, got.Attempts, "the retry and the send; deferred releases spend none")
}

// The retry was recorded but its copy never published (the broker lost it,
// or the worker died before publishing): the stale original is refused, so
// nothing carries the delivery on. The reconciler gives the notification a
// fresh event once its retry is overdue, and that event, under a new message
// id, is claimed and sent.
func testStaleCopyLostRetryReconciled(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	evs := relayAll(t, ctx, h)
	require.Len(t, evs, 1)
	orig := evs[0].ID
	c := claimCopy(t, ctx, s, orig, 0, n.ID, lease)
	require.Equal(t, notify.ClaimTaken, c.Status)
	ok, err := deliverytest.Record(ctx, s, []notify.DeliveryResult{{Claim: c, Outcome: notify.AttemptRetry, Error: "451 later", RetryIn: time.Hour}})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, ok)
	require.Equal(t, notify.ClaimDuplicate, claimCopy(t, ctx, s, orig, 0, n.ID, lease).Status, "the stale original")

	ids, err := s.Reconcile(ctx, time.Since(quietBoundary(t)), 100)
	require.NoError(t, err)
	require.Empty(t, ids, "the retry is not due yet")
	// A negative duration looks into the future: the retry, due in an
	// hour, is overdue by then.
	ids, err = s.Reconcile(ctx, -2*time.Hour, 100)
	require.NoError(t, err)
	require.Equal(t, []int64{n.ID}, ids)

	fresh := allEvents(t, ctx, s)
	require.Len(t, fresh, 1)
	require.NotEqual(t, orig, fresh[0].ID)
	_, nid, err := notify.Message{ID: fresh[0].ID, Type: fresh[0].Type, Payload: fresh[0].Payload}.Decode()
	require.NoError(t, err)
	require.Equal(t, n.ID, nid)
	fc := claimCopy(t, ctx, s, fresh[0].ID, 0, n.ID, lease)
	require.Equal(t, notify.ClaimTaken, fc.Status, "the reconciled event is a first delivery")
	require.Equal(t, 2, fc.Attempt)
	require.True(t, record1(t, ctx, s, fc, notify.AttemptSent, ""))
	got := get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusSent, got.Status)
	require.Equal(t, 2, got.Attempts)
}

// A notification dead-lettered by a retry's copy and redriven: its fresh
// event (a new message id, retry count 0) is claimed; the old message's
// original and copies stay duplicates.
func testStaleCopyRedrive(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	evs := relayAll(t, ctx, h)
	require.Len(t, evs, 1)
	old := evs[0].ID
	attemptOnce(t, ctx, s, old, 0, n.ID, notify.AttemptRetry, "451 later")
	attemptOnce(t, ctx, s, old, 1, n.ID, notify.AttemptDead, "550 gone")
	require.Equal(t, notify.StatusFailed, get(t, ctx, s, n.ID).Status)

	redriven, err := s.Redrive(ctx, n.ID)
	require.NoError(t, err)
	require.True(t, redriven)
	fresh := allEvents(t, ctx, s)
	require.Len(t, fresh, 1)
	require.Greater(t, fresh[0].ID, old)
	for rc := range 3 {
		require.Equal(t, notify.ClaimDuplicate, claimCopy(t, ctx, s, old, rc, n.ID, lease).Status, "old message, retry count %d", rc)
	}
	attemptOnce(t, ctx, s, fresh[0].ID, 0, n.ID, notify.AttemptRetry, "451 later")
	require.Equal(t, notify.ClaimDuplicate, claimCopy(t, ctx, s, fresh[0].ID, 0, n.ID, lease).Status, "the fresh event's own stale copy")
	attemptOnce(t, ctx, s, fresh[0].ID, 1, n.ID, notify.AttemptSent, "")
	got := get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusSent, got.Status)
	require.Equal(t, 4, got.Attempts)
}
