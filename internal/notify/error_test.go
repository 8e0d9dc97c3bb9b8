package notify_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

func TestThrottled(t *testing.T) {
	require.NoError(t, notify.Throttled(nil, time.Second))
	base := errors.New("421 too many messages")
	err := fmt.Errorf("send: %w", notify.Throttled(base, 3*time.Second))
	after, ok := notify.IsThrottled(err)
	require.True(t, ok)
	require.Equal(t, 3*time.Second, after)
	require.ErrorIs(t, err, base)
	require.False(t, notify.IsSenderDown(err))
	require.False(t, notify.IsPermanent(err))
	_, ok = notify.IsThrottled(base)
	require.False(t, ok)
	after, ok = notify.IsThrottled(notify.Throttled(base, -time.Second))
	require.True(t, ok)
	require.Zero(t, after)
}

// Quiet keeps the cause for errors.Is and As under a text that does not
// change with it.
func TestQuiet(t *testing.T) {
	a := notify.Quiet("deadline exceeded", context.DeadlineExceeded)
	b := notify.Quiet("deadline exceeded", fmt.Errorf("dial tcp: %w", os.ErrDeadlineExceeded))
	require.Equal(t, a.Error(), b.Error())
	require.ErrorIs(t, a, context.DeadlineExceeded)
	require.ErrorIs(t, b, os.ErrDeadlineExceeded)
	require.ErrorIs(t, notify.SenderDown(a), context.DeadlineExceeded)
}
