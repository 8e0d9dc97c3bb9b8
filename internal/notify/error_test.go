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

// Permanent and SenderDown keep err's text and chain, are found through
// wrapping, and are told apart.
func TestMarks(t *testing.T) {
	require.NoError(t, notify.Permanent(nil))
	require.NoError(t, notify.SenderDown(nil))
	base := errors.New("550 no such user")
	perm := fmt.Errorf("send: %w", notify.Permanent(base))
	require.Equal(t, "send: 550 no such user", perm.Error())
	require.ErrorIs(t, perm, base)
	require.True(t, notify.IsPermanent(perm))
	require.False(t, notify.IsSenderDown(perm))
	down := fmt.Errorf("dial: %w", notify.SenderDown(base))
	require.Equal(t, "dial: 550 no such user", down.Error())
	require.ErrorIs(t, down, base)
	require.True(t, notify.IsSenderDown(down))
	require.False(t, notify.IsPermanent(down))
	both := notify.Permanent(notify.SenderDown(base))
	require.True(t, notify.IsPermanent(both))
	require.True(t, notify.IsSenderDown(both))
	require.False(t, notify.IsPermanent(base))
	require.False(t, notify.IsSenderDown(nil))
}
