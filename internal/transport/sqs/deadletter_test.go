package sqs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	sqstr "github.com/heraldhq/herald/internal/transport/sqs"
)

// TestRemoveDeadLetters: a redrive removes the dead letters of the
// notifications it moved back to pending (by the notification id in the
// payload), and leaves the others, visible to the next reader.
func TestRemoveDeadLetters(t *testing.T) {
	cfg := config(t)
	_, err := newPublisher(t, cfg).Publish(t.Context(), testEvents(3, ""))
	require.NoError(t, err)
	consume(t, cfg, func(ctx context.Context, d notify.Delivery) {
		assert.NoError(t, d.DeadLetter(ctx, "550 no such mailbox"))
	})
	require.Eventually(t, func() bool { return len(peek(t, cfg)) == 3 }, wait, tick)

	n, err := sqstr.RemoveDeadLetters(t.Context(), cfg, []int64{1, 3, 99})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	left := peek(t, cfg)
	require.Len(t, left, 1)
	require.Equal(t, int64(2), left[0].NotificationID)
	require.Equal(t, "550 no such mailbox", left[0].Reason)

	n, err = sqstr.RemoveDeadLetters(t.Context(), cfg, nil)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Len(t, peek(t, cfg), 1)
}
