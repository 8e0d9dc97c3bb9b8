package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
)

// priorityTests are the subtests of issue 34, point 5 (priority), and of
// the backlog figures that leave scheduled rows out.
var priorityTests = []subtest{
	{"PriorityStored", testPriorityStored},
	{"PriorityClaimOrder", testPriorityClaimOrder},
	{"PriorityRelayOrder", testPriorityRelayOrder},
	{"BacklogLeavesScheduledOut", testBacklogLeavesScheduledOut},
}

// createPriority creates request(i) with priority p and, when sendAt is
// not nil, that send_at.
func createPriority(t *testing.T, ctx context.Context, s Store, i int, p notify.Priority, sendAt *time.Time) notify.Notification {
	t.Helper()
	r := request(i)
	r.Priority, r.SendAt = p, sendAt
	return createNew(t, ctx, s, notify.NewNotification{Request: r})
}

// A notification keeps its priority (normal when none is given), on a
// single create and in a batch; a key replayed with another priority is a
// conflict.
func testPriorityStored(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	for i, p := range []notify.Priority{"", notify.PriorityHigh, notify.PriorityNormal, notify.PriorityBulk} {
		n := createPriority(t, ctx, s, i+1, p, nil)
		require.Equal(t, p.OrDefault(), n.Priority, "create answers %q", p)
		got := get(t, ctx, s, n.ID)
		require.Equal(t, p.OrDefault(), got.Priority, "stored %q", p)
	}
	nns := batchOf(10, 3)
	nns[0].Request.Priority = notify.PriorityBulk
	nns[1].Request.Priority = notify.PriorityHigh
	nns[2].IdempotencyKey = "k-batch"
	nns[2].Request.Priority = notify.PriorityBulk
	out, err := s.CreateBatch(ctx, nns)
	require.NoError(t, err)
	for i, r := range out {
		require.NoError(t, r.Err)
		got := get(t, ctx, s, r.Created.Notification.ID)
		require.Equal(t, nns[i].Request.Priority.OrDefault(), got.Priority, "batch item %d", i)
	}
	page, err := s.List(ctx, notify.ListFilter{Limit: 100})
	require.NoError(t, err)
	require.Len(t, page.Items, 7)
	for _, n := range page.Items {
		require.NotEmpty(t, n.Priority, "listed %d", n.ID)
	}

	r := request(20)
	r.Priority = notify.PriorityHigh
	_, err = s.Create(ctx, notify.NewNotification{Request: r, IdempotencyKey: "k"})
	require.NoError(t, err)
	c, err := s.Create(ctx, notify.NewNotification{Request: r, IdempotencyKey: "k"})
	require.NoError(t, err)
	require.True(t, c.Replayed)
	r.Priority = notify.PriorityBulk
	_, err = s.Create(ctx, notify.NewNotification{Request: r, IdempotencyKey: "k"})
	require.ErrorIs(t, err, notify.ErrConflict, "the same key with another priority")
}

// priorityBacklog writes three bulk, then three normal, then three high
// notifications, due now, and one of each priority scheduled for later,
// and returns the due ones' ids by priority.
func priorityBacklog(t *testing.T, ctx context.Context, s Store) map[notify.Priority][]int64 {
	t.Helper()
	later := time.Now().Add(time.Hour)
	due := map[notify.Priority][]int64{}
	i := 0
	for _, p := range []notify.Priority{notify.PriorityBulk, notify.PriorityNormal, notify.PriorityHigh} {
		createPriority(t, ctx, s, 100+i, p, &later)
		for range 3 {
			i++
			due[p] = append(due[p], createPriority(t, ctx, s, i, p, nil).ID)
		}
	}
	return due
}

// claimedIDs decodes the notification ids of messages.
func claimedIDs(t *testing.T, ms []notify.Message) []int64 {
	t.Helper()
	out := make([]int64, len(ms))
	for i, m := range ms {
		_, id, err := m.Decode()
		require.NoError(t, err)
		out[i] = id
	}
	return out
}

// The table transport's claim takes every due high row before any
// normal one and every due normal one before any bulk one, each
// priority in due order, returns them highest first, and never takes a
// row scheduled for later, whatever its priority.
func testPriorityClaimOrder(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	due := priorityBacklog(t, ctx, s)

	first, err := s.Claim(ctx, "w", 4, time.Minute)
	require.NoError(t, err)
	require.Equal(t, append(append([]int64{}, due[notify.PriorityHigh]...), due[notify.PriorityNormal][0]), claimedIDs(t, first),
		"the high rows, then the first normal one")
	for i, m := range first {
		want := notify.PriorityHigh
		if i == 3 {
			want = notify.PriorityNormal
		}
		require.Equal(t, want, m.Priority.OrDefault(), "message %d", i)
	}
	rest, err := s.Claim(ctx, "w", 100, time.Minute)
	require.NoError(t, err)
	require.Equal(t, append(append([]int64{}, due[notify.PriorityNormal][1:]...), due[notify.PriorityBulk]...), claimedIDs(t, rest),
		"the other normal rows, then the bulk ones; none scheduled for later")
}

// The relays (of every type, and of the notifications) lease in the same
// order, and hand a batch on highest first.
func testPriorityRelayOrder(t *testing.T, ctx context.Context, h Harness) {
	for _, types := range [][]string{nil, requestedOnly} {
		s := h.Store
		due := priorityBacklog(t, ctx, s)
		var got [][]int64
		for _, limit := range []int{4, 100} {
			var batch []int64
			_, err := relay.Batch(ctx, s, limit, types, func(_ context.Context, evs []notify.Event) ([]int64, error) {
				for _, e := range evs {
					if e.Type != notify.EventRequested {
						continue
					}
					_, id, err := notify.Message{ID: e.ID, Type: e.Type, Payload: e.Payload}.Decode()
					require.NoError(t, err)
					batch = append(batch, id)
				}
				return ids(evs), nil
			})

			require.NoError(t, err)
			got = append(got, batch)
		}
		require.Equal(t, [][]int64{
			append(append([]int64{}, due[notify.PriorityHigh]...), due[notify.PriorityNormal][0]),
			append(append([]int64{}, due[notify.PriorityNormal][1:]...), due[notify.PriorityBulk]...),
		}, got, "relay of %v", types)
	}
}

// The backlog (OutboxStats.Unprocessed, the age of its oldest row, and
// what HERALD_MAX_BACKLOG compares) counts the due rows only; the rows
// scheduled for later are counted apart, and become backlog when due.
func testBacklogLeavesScheduledOut(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	later := time.Now().Add(time.Hour)
	soon := time.Now().Add(3 * time.Second)
	for i := range 3 {
		createPriority(t, ctx, s, i+1, notify.PriorityBulk, &later)
	}
	createPriority(t, ctx, s, 10, "", &soon)
	createPriority(t, ctx, s, 11, "", nil) // one due now

	st, err := s.OutboxStats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Unprocessed, "the backlog is the due row")
	require.EqualValues(t, 4, st.Scheduled, "the rows scheduled for later")
	require.False(t, st.ScheduledCapped)
	require.Less(t, st.OldestAge, time.Minute, "scheduled rows do not age the backlog")

	// Relayed, the due row leaves the backlog empty: the scheduled rows
	// wait without counting. On a loaded machine the soon one may be due
	// by the time the stats are read (seen on MongoDB): the strict check
	// holds for a read that ended before it was due.
	require.Len(t, relayIDs(t, ctx, s, requestedOnly), 1)
	st, err = s.OutboxStats(ctx)
	read := time.Now()
	require.NoError(t, err)
	if read.Before(soon) {
		require.Zero(t, st.Unprocessed)
		require.Zero(t, st.OldestAge)
		require.EqualValues(t, 4, st.Scheduled)
	} else {
		require.EqualValues(t, 4, st.Unprocessed+st.Scheduled, "the soon row is backlog or scheduled: %+v", st)
		require.LessOrEqual(t, st.Unprocessed, int64(1), "only the soon row can be due: %+v", st)
	}

	// Once due, the soon one is backlog.
	require.Eventually(t, func() bool {
		st, err = s.OutboxStats(ctx)
		return err != nil || st.Unprocessed == 1
	}, wait, 20*time.Millisecond)
	require.NoError(t, err)
	require.EqualValues(t, 3, st.Scheduled)
	require.Less(t, st.OldestAge, time.Minute, "its age counts from its send_at, not its create")
}
