package consume

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSleep(t *testing.T) {
	require.True(t, Sleep(context.Background(), time.Microsecond))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.False(t, Sleep(ctx, time.Hour), "an ended context ends the pause")
}

func TestEveryTicksUntilTickSaysStop(t *testing.T) {
	n := 0
	Every(context.Background(), time.Microsecond, nil, func() bool {
		n++
		return n < 3
	})
	require.Equal(t, 3, n)
}

func TestEveryWakesAtOnceAndEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	wake := make(chan struct{})
	ticks := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, time.Hour, wake, func() bool {
			ticks <- struct{}{}
			return true
		})
	}()
	wake <- struct{}{}
	select {
	case <-ticks:
	case <-time.After(10 * time.Second):
		t.Fatal("a wake did not tick")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not return when its context ended")
	}
}
