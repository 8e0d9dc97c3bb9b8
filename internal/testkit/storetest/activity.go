package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// testActivity: the console's overview counts what was created, sent and
// dead-lettered since a time, per minute, and nothing from before it.
func testActivity(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	create(t, ctx, s, 0) // before the window: not counted
	since := boundary(t)
	sent, dead := create(t, ctx, s, 1), create(t, ctx, s, 2)
	create(t, ctx, s, 3) // stays pending
	attemptOnce(t, ctx, s, 101, 0, sent.ID, notify.AttemptSent, "")
	deadLetter(t, ctx, s, 102, dead, "550 mailbox unavailable")

	a, err := s.Activity(ctx, since)
	require.NoError(t, err)
	sum := func(m map[time.Time]int64) (n int64) {
		for minute, c := range m {
			require.Equal(t, minute.Truncate(time.Minute), minute, "keys are minutes")
			require.False(t, minute.Before(since.Truncate(time.Minute)), "no minute before the window")
			require.False(t, minute.After(time.Now()), "no minute in the future")
			n += c
		}
		return n
	}
	require.EqualValues(t, 3, sum(a.Created), "created since: three, not the one before")
	require.EqualValues(t, 1, sum(a.Delivered), "delivered: the sent one")
	require.EqualValues(t, 1, a.Failed, "dead-lettered: one")

	// A window that begins later counts none of it.
	later, err := s.Activity(ctx, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Zero(t, sum(later.Created)+sum(later.Delivered)+later.Failed)
}
