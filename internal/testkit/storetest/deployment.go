package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// The subtests of what the console and GET /status read of the whole
// deployment: the notifications still pending, and the reports the
// processes write of themselves.
var deploymentTests = []subtest{
	{"PendingStats", testPendingStats},
	{"ProcessReports", testProcessReports},
	{"ProcessReportsForgotten", testProcessReportsForgotten},
}

// testPendingStats: the pending notifications are counted, whatever the
// outbox says (an event already relayed is still a notification pending),
// with the age of the oldest; sent and dead-lettered ones are not.
func testPendingStats(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	st, err := s.PendingStats(ctx)
	require.NoError(t, err)
	require.Equal(t, notify.PendingStats{}, st, "nothing pending on an empty store")

	oldest := create(t, ctx, s, 0)
	sent, dead := create(t, ctx, s, 1), create(t, ctx, s, 2)
	create(t, ctx, s, 3)
	create(t, ctx, s, 4)
	h.Backdate(t, oldest.ID, 2*time.Hour)
	// The events handed on: the outbox's backlog is empty, the
	// notifications are still pending.
	relayAll(t, ctx, h)
	require.Zero(t, unprocessed(t, ctx, s))

	st, err = s.PendingStats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 5, st.Pending)
	require.False(t, st.Capped)
	require.GreaterOrEqual(t, st.OldestAge, 2*time.Hour, "the oldest pending one's age, from its created_at")
	require.Less(t, st.OldestAge, 3*time.Hour)

	attemptOnce(t, ctx, s, 101, 0, sent.ID, notify.AttemptSent, "")
	deadLetter(t, ctx, s, 102, dead, "550 mailbox unavailable")
	attemptOnce(t, ctx, s, 103, 0, oldest.ID, notify.AttemptSent, "")
	st, err = s.PendingStats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Pending, "sent and dead-lettered ones are not pending")
	require.Less(t, st.OldestAge, time.Hour, "the oldest is now one created by this test, not the backdated one sent")
}

// testProcessReports: a report is written, refreshed (its senders
// replaced, its start kept) and deleted, each process on its own row.
func testProcessReports(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	ps, err := s.Processes(ctx)
	require.NoError(t, err)
	require.Empty(t, ps)

	started := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	down := started.Add(30 * time.Second)
	until := down.Add(time.Minute)
	w := notify.Process{ID: "w1", Host: "host-a", PID: 41, Roles: []string{"worker"}, Version: "v1.2.3", StartedAt: started,
		Senders: []notify.SenderReport{
			{Channel: "email", Up: false, Class: "down", Reason: "dial tcp: connection refused", Since: down, Until: &until},
			{Channel: "webhook", Up: true, Since: started, PausedDestinations: 2},
		}}
	api := notify.Process{ID: "a1", Host: "host-b", PID: 7, Roles: []string{"api", "relay"}, StartedAt: started.Add(time.Second)}
	require.NoError(t, s.BeatProcess(ctx, w, time.Hour))
	require.NoError(t, s.BeatProcess(ctx, api, time.Hour))

	ps, err = s.Processes(ctx)
	require.NoError(t, err)
	require.Len(t, ps, 2)
	got := ps[0]
	require.Equal(t, "w1", got.ID, "oldest start first")
	require.Equal(t, "host-a", got.Host)
	require.Equal(t, 41, got.PID)
	require.Equal(t, []string{"worker"}, got.Roles)
	require.Equal(t, "v1.2.3", got.Version)
	require.True(t, got.StartedAt.Equal(started), "started_at %s, want %s", got.StartedAt, started)
	require.Equal(t, time.UTC, got.StartedAt.Location())
	require.False(t, got.SeenAt.IsZero())
	require.GreaterOrEqual(t, got.Age, time.Duration(0))
	require.Less(t, got.Age, time.Minute, "seen just now")
	require.Len(t, got.Senders, 2)
	require.Equal(t, "email", got.Senders[0].Channel)
	require.False(t, got.Senders[0].Up)
	require.Equal(t, "down", got.Senders[0].Class)
	require.Equal(t, "dial tcp: connection refused", got.Senders[0].Reason)
	require.True(t, got.Senders[0].Since.Equal(down))
	require.NotNil(t, got.Senders[0].Until)
	require.True(t, got.Senders[0].Until.Equal(until))
	require.True(t, got.Senders[1].Up)
	require.Equal(t, 2, got.Senders[1].PausedDestinations)
	require.Nil(t, got.Senders[1].Until)
	require.Equal(t, []string{"api", "relay"}, ps[1].Roles)
	require.Empty(t, ps[1].Senders, "a process without a worker reports no sender")

	// A refresh replaces the senders and keeps the start.
	w.Senders = []notify.SenderReport{{Channel: "email", Up: true, Since: until}}
	w.StartedAt = time.Now().UTC()
	require.NoError(t, s.BeatProcess(ctx, w, time.Hour))
	ps, err = s.Processes(ctx)
	require.NoError(t, err)
	require.Len(t, ps, 2)
	require.Equal(t, "w1", ps[0].ID)
	require.True(t, ps[0].StartedAt.Equal(started), "a refresh keeps started_at")
	require.Len(t, ps[0].Senders, 1)
	require.True(t, ps[0].Senders[0].Up)

	require.NoError(t, s.LeaveProcess(ctx, "w1"))
	require.NoError(t, s.LeaveProcess(ctx, "w1"), "leaving twice is no error")
	ps, err = s.Processes(ctx)
	require.NoError(t, err)
	require.Len(t, ps, 1)
	require.Equal(t, "a1", ps[0].ID)
}

// testProcessReportsForgotten: a writer deletes the reports not refreshed
// for longer than its forget, never its own.
func testProcessReportsForgotten(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	gone := notify.Process{ID: "gone", Host: "h", PID: 1, Roles: []string{"worker"}, StartedAt: time.Now().UTC()}
	me := notify.Process{ID: "me", Host: "h", PID: 2, Roles: []string{"worker"}, StartedAt: time.Now().UTC()}
	require.NoError(t, s.BeatProcess(ctx, gone, time.Hour))
	require.NoError(t, s.BeatProcess(ctx, me, time.Hour))
	ps, err := s.Processes(ctx)
	require.NoError(t, err)
	require.Len(t, ps, 2, "a forget of an hour deletes neither")

	// With a forget of a millisecond, gone's report (written before)
	// goes at a beat of me's a little later; me's own stays.
	require.Eventually(t, func() bool {
		require.NoError(t, s.BeatProcess(ctx, me, time.Millisecond))
		ps, err := s.Processes(ctx)
		require.NoError(t, err)
		return len(ps) == 1
	}, wait, 10*time.Millisecond)
	ps, err = s.Processes(ctx)
	require.NoError(t, err)
	require.Len(t, ps, 1)
	require.Equal(t, "me", ps[0].ID)
}
