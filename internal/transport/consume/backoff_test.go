package consume

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBackoffDoublesUpToMaxAndResets(t *testing.T) {
	ctx := context.Background()
	b := Backoff{Min: time.Microsecond, Max: 5 * time.Microsecond}
	var got []time.Duration
	for range 5 {
		got = append(got, b.Current())
		require.True(t, b.Wait(ctx))
	}
	require.Equal(t, []time.Duration{1000, 2000, 4000, 5000, 5000}, got)

	b.Reset()
	require.Equal(t, time.Microsecond, b.Current())
	require.True(t, b.Wait(ctx))
	require.Equal(t, 2*time.Microsecond, b.Current())
}

func TestBackoffWaitEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := Backoff{Min: time.Hour, Max: time.Hour}
	require.False(t, b.Wait(ctx), "an ended context ends the wait")

	ctx2, cancel2 := context.WithCancel(context.Background())
	done := make(chan bool)
	go func() { done <- b.Wait(ctx2) }()
	cancel2()
	select {
	case ok := <-done:
		require.False(t, ok)
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return when its context ended")
	}
}
