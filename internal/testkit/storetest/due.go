package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// testClaimDueOrder: the table claim takes due rows earliest due first, not
// in id order (issue 32). A row handed back due at once (Reschedule, delay
// 0) is due at that moment, behind the rows that were due before it, so
// that a row the worker keeps handing back cannot hold up the others; a row
// scheduled for later is not claimed before then; Reschedule counts a
// retry only when asked.
func testClaimDueOrder(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	var rows []notify.Message
	for i := range 3 {
		create(t, ctx, s, i)
	}
	// The stores keep times to the microsecond or, MongoDB, the
	// millisecond: the hand-back below must fall after the creates.
	time.Sleep(5 * time.Millisecond)

	first, err := s.Claim(ctx, "worker-a", 1, time.Hour)
	require.NoError(t, err)
	require.Len(t, first, 1)
	require.NoError(t, s.Reschedule(ctx, first[0].Key(), "worker-a", 0, "", false))

	// The two rows due since their create come before the one handed
	// back, though its id is the lowest.
	next, err := s.Claim(ctx, "worker-b", 2, time.Hour)
	require.NoError(t, err)
	require.Len(t, next, 2)
	require.NotContains(t, msgIDs(next), first[0].ID, "the handed-back row went ahead of rows due before it")
	rows = append(rows, next...)
	last, err := s.Claim(ctx, "worker-c", 10, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []int64{first[0].ID}, msgIDs(last))
	require.Zero(t, last[0].RetryCount, "a hand-back is not a retry")

	// A retry scheduled for later is not due; one due at once is, and
	// counts.
	require.NoError(t, s.Reschedule(ctx, last[0].Key(), "worker-c", time.Hour, "451 later", true))
	require.NoError(t, s.Reschedule(ctx, rows[0].Key(), "worker-b", 0, "451 now", true))
	again, err := s.Claim(ctx, "worker-d", 10, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []int64{rows[0].ID}, msgIDs(again))
	require.Equal(t, 1, again[0].RetryCount)
	for _, m := range append(again, rows[1]) {
		token := "worker-d"
		if m.ID == rows[1].ID {
			token = "worker-b"
		}
		require.NoError(t, s.Finish(ctx, []notify.OutboxKey{m.Key()}, token, ""))
	}
	require.EqualValues(t, 1, unprocessed(t, ctx, s), "the retry scheduled for later")
}
