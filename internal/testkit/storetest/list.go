package storetest

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// The subtests of the listing and of the attempts history.

// createFor creates a notification for user; i makes it distinct.
func createFor(t *testing.T, ctx context.Context, s Store, user string, i int) notify.Notification {
	t.Helper()
	r := request(i)
	r.UserID = user
	return createNew(t, ctx, s, notify.NewNotification{Request: r})
}

// newestFirst returns the ids of ns in the listing's order.
func newestFirst(ns []notify.Notification) []int64 {
	ns = slices.Clone(ns)
	slices.SortFunc(ns, func(a, b notify.Notification) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return int(b.ID - a.ID)
	})
	return notificationIDs(ns)
}

// listAll pages through f's listing limit at a time and returns the ids,
// requiring that every page but the last is full and names where the next
// one starts.
func listAll(t *testing.T, ctx context.Context, s Store, f notify.ListFilter) []int64 {
	t.Helper()
	var got []int64
	for pages := 0; ; pages++ {
		require.Less(t, pages, 1000, "the listing does not end")
		page, err := s.List(ctx, f)
		require.NoError(t, err)
		got = append(got, notificationIDs(page.Items)...)
		if page.Next == nil {
			require.LessOrEqual(t, len(page.Items), f.Limit)
			return got
		}
		require.Len(t, page.Items, f.Limit, "a page before the last is full")
		require.Equal(t, page.Items[len(page.Items)-1].Position(), *page.Next)
		f.After = page.Next
	}
}

func testList(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	page, err := s.List(ctx, notify.ListFilter{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, page.Items)
	require.Nil(t, page.Next)

	var all []notify.Notification
	for i := range 7 {
		all = append(all, createFor(t, ctx, s, []string{"ann", "bob"}[i%2], i))
	}
	want := newestFirst(all)

	page, err = s.List(ctx, notify.ListFilter{Limit: 100})
	require.NoError(t, err)
	require.Equal(t, want, notificationIDs(page.Items), "newest first")
	require.Nil(t, page.Next, "one page holds them all")
	for _, n := range page.Items {
		stored := get(t, ctx, s, n.ID)
		require.Empty(t, n.Body, "a listing leaves the body out")
		stored.Body = ""
		require.Equal(t, stored.Position(), n.Position())
		require.Equal(t, stored.UserID, n.UserID)
		require.Equal(t, stored.To, n.To)
		require.Equal(t, stored.Subject, n.Subject)
		require.Equal(t, stored.Status, n.Status)
	}

	// Exactly a page's worth: no next page announced for nothing.
	page, err = s.List(ctx, notify.ListFilter{Limit: 7})
	require.NoError(t, err)
	require.Len(t, page.Items, 7)
	require.Nil(t, page.Next)

	for _, limit := range []int{1, 2, 3, 6} {
		require.Equal(t, want, listAll(t, ctx, s, notify.ListFilter{Limit: limit}), "pages of %d", limit)
	}

	_, err = s.List(ctx, notify.ListFilter{})
	require.Error(t, err, "a limit below 1 is the caller's mistake")
}

func testListFilters(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	var ann, bob []notify.Notification
	for i := range 4 {
		ann = append(ann, createFor(t, ctx, s, "ann", i))
		bob = append(bob, createFor(t, ctx, s, "bob", 10+i))
	}
	annFailed := []notify.Notification{deadLetter(t, ctx, s, 900, ann[1], "550 no"), deadLetter(t, ctx, s, 901, ann[3], "550 no")}
	bobFailed := []notify.Notification{deadLetter(t, ctx, s, 902, bob[0], "550 no")}
	pending := []notify.Notification{ann[0], ann[2], bob[1], bob[2], bob[3]}

	for _, tc := range []struct {
		name string
		f    notify.ListFilter
		want []notify.Notification
	}{
		{"user", notify.ListFilter{UserID: "ann"}, ann},
		{"other user", notify.ListFilter{UserID: "bob"}, bob},
		{"unknown user", notify.ListFilter{UserID: "carol"}, nil},
		{"user is exact", notify.ListFilter{UserID: "an"}, nil},
		{"failed", notify.ListFilter{Status: notify.StatusFailed}, append(slices.Clone(annFailed), bobFailed...)},
		{"pending", notify.ListFilter{Status: notify.StatusPending}, pending},
		{"sent", notify.ListFilter{Status: notify.StatusSent}, nil},
		{"user and status", notify.ListFilter{UserID: "ann", Status: notify.StatusFailed}, annFailed},
		// The extremes of RFC 3339 (and one before year 1, as a negative
		// offset makes it in UTC) are a filter like any other, not an error.
		{"widest window", notify.ListFilter{
			CreatedAfter:  time.Date(0, 12, 31, 23, 0, 0, 0, time.UTC),
			CreatedBefore: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		}, append(slices.Clone(ann), bob...)},
		{"unicode user", notify.ListFilter{UserID: "anné😀"}, nil},
	} {
		for _, limit := range []int{1, 2, 50} {
			tc.f.Limit = limit
			got := listAll(t, ctx, s, tc.f)
			require.Equal(t, newestFirst(tc.want), append([]int64{}, got...), "%s, pages of %d", tc.name, limit)
		}
	}
}

func testListTimeWindow(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	var early, middle, late []notify.Notification
	for i := range 3 {
		early = append(early, createFor(t, ctx, s, "ann", i))
	}
	cut1 := boundary(t)
	for i := range 3 {
		middle = append(middle, createFor(t, ctx, s, "ann", 10+i))
	}
	cut2 := boundary(t)
	for i := range 2 {
		late = append(late, createFor(t, ctx, s, "bob", 20+i))
	}
	both := append(slices.Clone(middle), late...)
	for _, tc := range []struct {
		name string
		f    notify.ListFilter
		want []notify.Notification
	}{
		{"window", notify.ListFilter{CreatedAfter: cut1, CreatedBefore: cut2}, middle},
		{"after", notify.ListFilter{CreatedAfter: cut1}, both},
		{"before", notify.ListFilter{CreatedBefore: cut1}, early},
		{"window and user", notify.ListFilter{CreatedAfter: cut1, UserID: "bob"}, late},
		{"empty window", notify.ListFilter{CreatedAfter: cut2, CreatedBefore: cut1}, nil},
	} {
		for _, limit := range []int{1, 2, 50} {
			tc.f.Limit = limit
			require.Equal(t, newestFirst(tc.want), append([]int64{}, listAll(t, ctx, s, tc.f)...), "%s, pages of %d", tc.name, limit)
		}
	}

	// The window is half-open: a notification's own created_at is inside
	// [created_at, ...) and outside [..., created_at).
	n := middle[1]
	page, err := s.List(ctx, notify.ListFilter{CreatedAfter: n.CreatedAt, CreatedBefore: n.CreatedAt.Add(time.Microsecond), Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []int64{n.ID}, notificationIDs(page.Items))
	page, err = s.List(ctx, notify.ListFilter{CreatedBefore: n.CreatedAt, CreatedAfter: cut1, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []int64{middle[0].ID}, notificationIDs(page.Items))
}

// Paging while creates go on: no notification is listed twice, the order
// never goes back, and every notification that existed before the first
// page is listed.
func testListConcurrentInserts(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	var before []notify.Notification
	for i := range 30 {
		before = append(before, createFor(t, ctx, s, "ann", i))
	}
	stop := make(chan struct{})
	var (
		wg      sync.WaitGroup
		created atomic.Int64
	)
	for w := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Create(ctx, notify.NewNotification{Request: request(1000*(w+1) + i)}); err != nil {
					t.Errorf("concurrent create: %v", err)
					return
				}
				created.Add(1)
			}
		})
	}
	var (
		got  []notify.Notification
		f    = notify.ListFilter{Limit: 4}
		seen = map[int64]bool{}
	)
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10000)
		page, err := s.List(ctx, f)
		require.NoError(t, err)
		got = append(got, page.Items...)
		if page.Next == nil {
			break
		}
		f.After = page.Next
		// At least one create lands between two pages, so that a listing
		// that counted its way down (OFFSET) would list rows twice.
		mark := created.Load()
		require.Eventually(t, func() bool { return created.Load() > mark }, wait, time.Millisecond)
	}
	close(stop)
	wg.Wait()
	for i, n := range got {
		require.False(t, seen[n.ID], "notification %d listed twice", n.ID)
		seen[n.ID] = true
		if i > 0 {
			prev := got[i-1]
			older := n.CreatedAt.Before(prev.CreatedAt) || n.CreatedAt.Equal(prev.CreatedAt) && n.ID < prev.ID
			require.True(t, older, "the order went back from %d to %d", prev.ID, n.ID)
		}
	}
	for _, n := range before {
		require.True(t, seen[n.ID], "notification %d existed before the first page and was not listed", n.ID)
	}
	t.Logf("listed %d notifications while %d creates went on (%d before)", len(got), created.Load(), len(before))
}

func testAttempts(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	require.NotNil(t, h.AddAttempt, "Harness.AddAttempt")
	n := create(t, ctx, s, 1)
	other := create(t, ctx, s, 2)

	got, err := s.Attempts(ctx, n.ID)
	require.NoError(t, err)
	require.NotNil(t, got, "no attempt yet is an empty list")
	require.Empty(t, got)

	_, err = s.Attempts(ctx, other.ID+1000)
	require.ErrorIs(t, err, notify.ErrNotFound)

	at := time.Now().UTC().Truncate(time.Second)
	fin := func(d time.Duration) *time.Time { x := at.Add(d); return &x }
	want := []notify.Attempt{
		{Attempt: 1, MessageID: 11, StartedAt: at, FinishedAt: fin(time.Second), Outcome: notify.AttemptRetry, Error: "451 try later"},
		{Attempt: 1, MessageID: 12, StartedAt: at.Add(2 * time.Second), FinishedAt: fin(3 * time.Second), Outcome: notify.AttemptDeferred, Error: "dial tcp: connection refused"},
		{Attempt: 2, MessageID: 12, StartedAt: at.Add(4 * time.Second), FinishedAt: fin(5 * time.Second), Outcome: notify.AttemptSent},
		// In flight: no finish, no outcome yet.
		{Attempt: 3, MessageID: 13, StartedAt: at.Add(6 * time.Second)},
	}
	h.AddAttempt(t, other.ID, notify.Attempt{Attempt: 1, MessageID: 20, StartedAt: at, Outcome: notify.AttemptDead, Error: "550 no", FinishedAt: fin(0)})
	for _, a := range want {
		h.AddAttempt(t, n.ID, a)
	}
	got, err = s.Attempts(ctx, n.ID)
	require.NoError(t, err)
	require.Len(t, got, len(want))
	for i := range want {
		w, g := want[i], got[i]
		require.Equal(t, w.Attempt, g.Attempt, "attempt %d", i)
		require.Equal(t, w.MessageID, g.MessageID, "attempt %d", i)
		require.True(t, w.StartedAt.Equal(g.StartedAt), "attempt %d: started %s, want %s", i, g.StartedAt, w.StartedAt)
		if w.FinishedAt == nil {
			require.Nil(t, g.FinishedAt, "attempt %d", i)
		} else {
			require.NotNil(t, g.FinishedAt, "attempt %d", i)
			require.True(t, w.FinishedAt.Equal(*g.FinishedAt), "attempt %d", i)
		}
		require.Equal(t, w.Outcome, g.Outcome, "attempt %d", i)
		require.Equal(t, w.Error, g.Error, "attempt %d", i)
	}
	got, err = s.Attempts(ctx, other.ID)
	require.NoError(t, err)
	require.Len(t, got, 1, "each notification sees its own attempts")
	require.Equal(t, notify.AttemptDead, got[0].Outcome)
}
