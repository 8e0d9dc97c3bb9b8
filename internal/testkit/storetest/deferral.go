package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/deliverytest"
)

// deferralTests are the subtests of the attempts' history under deferrals
// (one row per outage, not per probe) and of its pages.
var deferralTests = []subtest{
	{"DeferralFolds", testDeferralFolds},
	{"DeferralLostClaimNotFolded", testDeferralLostClaimNotFolded},
	{"AttemptPages", testAttemptPages},
}

// deferOnce claims msg for n and records a deferral of kind with reason,
// as a worker's trial send to a provider still down does.
func deferOnce(t *testing.T, ctx context.Context, h Harness, msg, nid int64, kind, reason string) notify.Claim {
	t.Helper()
	c := claim1(t, ctx, h.Store, msg, nid, lease)
	require.Equal(t, notify.ClaimTaken, c.Status)
	ok, err := deliverytest.Record(ctx, h.Store, []notify.DeliveryResult{{Claim: c, Outcome: notify.AttemptDeferred, Deferral: kind, Error: reason}})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, ok)
	return c
}

// A deferral of the same kind as the notification's previous attempt is
// folded into that row (repeats, last_at, the latest error): a long outage
// probed many times keeps one row. Another kind, or another outcome in
// between, starts a new row; attempt numbers stay consecutive; a deferral
// without a kind (a worker from before kinds) is never folded.
func testDeferralFolds(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	first := deferOnce(t, ctx, h, 1, n.ID, notify.DeferDown, "dial tcp: connection refused")
	require.Equal(t, 1, first.Attempt)
	for i := range 12 {
		c := deferOnce(t, ctx, h, 1, n.ID, notify.DeferDown, "dial tcp: i/o timeout "+notify.FormatID(int64(i)))
		require.Equal(t, 2, c.Attempt, "a folded row's number is taken again")
	}
	rows := h.Attempts(t, n.ID)
	require.Len(t, rows, 1, "13 probes of one outage, one row")
	as, err := s.Attempts(ctx, n.ID)
	require.NoError(t, err)
	require.Len(t, as, 1)
	a := as[0]
	require.Equal(t, notify.AttemptDeferred, a.Outcome)
	require.Equal(t, notify.DeferDown, a.Deferral)
	require.Equal(t, 12, a.Repeats)
	require.Equal(t, "dial tcp: i/o timeout 11", a.Error, "the latest reason")
	require.NotNil(t, a.FinishedAt)
	require.NotNil(t, a.LastAt)
	require.False(t, a.LastAt.Before(*a.FinishedAt), "last_at %s, finished_at %s", a.LastAt, a.FinishedAt)
	require.Equal(t, time.UTC, a.LastAt.Location())
	got := get(t, ctx, s, n.ID)
	require.Zero(t, got.Attempts, "no attempt spent")
	require.Equal(t, notify.StatusPending, got.Status)

	// Throttling is another kind: a new row, which folds its own repeats.
	deferOnce(t, ctx, h, 1, n.ID, notify.DeferThrottled, "429 Too Many Requests")
	deferOnce(t, ctx, h, 1, n.ID, notify.DeferThrottled, "429 Too Many Requests")
	// Down again: a new row (the previous one is throttled).
	deferOnce(t, ctx, h, 1, n.ID, notify.DeferDown, "refused")
	// A spent attempt in between: the next deferral starts a row.
	// (Its message's copies with this retry count are spent: a fresh
	// message carries the delivery on.)
	require.NoError(t, recordFailure(ctx, s, 1, n.ID, "500 Internal Server Error", false))
	deferOnce(t, ctx, h, 2, n.ID, notify.DeferDown, "refused")
	// No kind: never folded.
	deferOnce(t, ctx, h, 2, n.ID, "", "legacy")
	deferOnce(t, ctx, h, 2, n.ID, "", "legacy")
	attemptOnce(t, ctx, s, 2, 0, n.ID, notify.AttemptSent, "")

	as, err = s.Attempts(ctx, n.ID)
	require.NoError(t, err)
	type row struct {
		Attempt  int
		Outcome  string
		Deferral string
		Repeats  int
	}
	var gotRows []row
	for _, a := range as {
		gotRows = append(gotRows, row{a.Attempt, a.Outcome, a.Deferral, a.Repeats})
		require.Equal(t, a.Repeats > 0, a.LastAt != nil, "attempt %d: last_at with repeats only", a.Attempt)
	}
	require.Equal(t, []row{
		{1, notify.AttemptDeferred, notify.DeferDown, 12},
		{2, notify.AttemptDeferred, notify.DeferThrottled, 1},
		{3, notify.AttemptDeferred, notify.DeferDown, 0},
		{4, notify.AttemptRetry, "", 0},
		{5, notify.AttemptDeferred, notify.DeferDown, 0},
		{6, notify.AttemptDeferred, "", 0},
		{7, notify.AttemptDeferred, "", 0},
		{8, notify.AttemptSent, "", 0},
	}, gotRows)
	require.Len(t, h.Attempts(t, n.ID), 8)
	got = get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusSent, got.Status)
	require.Equal(t, 2, got.Attempts, "the retry and the send")
}

// A deferral whose claim was lost (its lease taken over) is history, but
// not folded: only the claim that holds the notification folds.
func testDeferralLostClaimNotFolded(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	deferOnce(t, ctx, h, 1, n.ID, notify.DeferDown, "refused")
	stale := expiredClaim(t, ctx, s, 1, 0, n.ID)
	fresh := claim1(t, ctx, s, 1, n.ID, lease)
	require.Equal(t, notify.ClaimTaken, fresh.Status)
	ok, err := deliverytest.Record(ctx, s, []notify.DeliveryResult{{Claim: stale, Outcome: notify.AttemptDeferred, Deferral: notify.DeferDown, Error: "refused"}})
	require.NoError(t, err)
	require.Equal(t, []bool{false}, ok)
	require.Equal(t, []string{notify.AttemptDeferred, notify.AttemptDeferred, ""}, outcomes(h.Attempts(t, n.ID)))
	// The fresh claim's deferral folds into the row before it, the lost
	// one (a deferral of the same kind, finished).
	ok, err = deliverytest.Record(ctx, s, []notify.DeliveryResult{{Claim: fresh, Outcome: notify.AttemptDeferred, Deferral: notify.DeferDown, Error: "refused"}})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, ok)
	as, err := s.Attempts(ctx, n.ID)
	require.NoError(t, err)
	require.Len(t, as, 2)
	require.Equal(t, 1, as[1].Repeats)
}

// A notification's attempts come in pages, oldest or newest first: each
// page holds up to its limit, names the attempt to resume after while
// more remain, and the last names none, whatever the attempt numbers
// (rows written before numbering was consecutive share one).
func testAttemptPages(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	require.NotNil(t, h.AddAttempt, "Harness.AddAttempt")
	n := create(t, ctx, s, 1)
	empty := create(t, ctx, s, 2)
	at := time.Now().UTC().Truncate(time.Second)
	for i, num := range []int{1, 1, 2, 3, 4} {
		fin := at.Add(time.Duration(i)*time.Second + 500*time.Millisecond)
		h.AddAttempt(t, n.ID, notify.Attempt{Attempt: num, MessageID: int64(10 + i), StartedAt: at.Add(time.Duration(i) * time.Second),
			FinishedAt: &fin, Outcome: notify.AttemptRetry, Error: "e" + notify.FormatID(int64(i))})
	}
	read := func(f notify.AttemptFilter) [][]string {
		t.Helper()
		var pages [][]string
		for range 10 {
			p, err := s.AttemptPage(ctx, n.ID, f)
			require.NoError(t, err)
			var page []string
			for _, a := range p.Items {
				page = append(page, a.Error)
			}
			pages = append(pages, page)
			if p.Next == 0 {
				return pages
			}
			require.Len(t, p.Items, f.Limit, "a page that goes on is full")
			require.Equal(t, p.Items[len(p.Items)-1].ID, p.Next)
			f.After = p.Next
		}
		t.Fatal("the attempts listing does not end")
		return nil
	}
	require.Equal(t, [][]string{{"e0", "e1"}, {"e2", "e3"}, {"e4"}}, read(notify.AttemptFilter{Limit: 2}))
	require.Equal(t, [][]string{{"e4", "e3"}, {"e2", "e1"}, {"e0"}}, read(notify.AttemptFilter{Limit: 2, Newest: true}))
	require.Equal(t, [][]string{{"e0", "e1", "e2", "e3", "e4"}}, read(notify.AttemptFilter{Limit: 5}))
	require.Equal(t, [][]string{{"e4", "e3", "e2"}, {"e1", "e0"}}, read(notify.AttemptFilter{Limit: 3, Newest: true}))

	p, err := s.AttemptPage(ctx, empty.ID, notify.AttemptFilter{Limit: 2})
	require.NoError(t, err)
	require.NotNil(t, p.Items, "no attempt yet is an empty page")
	require.Empty(t, p.Items)
	require.Zero(t, p.Next)
	_, err = s.AttemptPage(ctx, empty.ID+1000, notify.AttemptFilter{Limit: 2})
	require.ErrorIs(t, err, notify.ErrNotFound)
}
