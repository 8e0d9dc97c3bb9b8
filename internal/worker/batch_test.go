package worker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Calls made while a group runs wait and go together in the next group;
// each gets its own answer.
func TestBatcherGroupsWaitingCalls(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		groups [][]int
	)
	first := make(chan struct{})
	gate := make(chan struct{})
	var once sync.Once
	b := &batcher[int, int]{max: 3, timeout: time.Second, run: func(_ context.Context, qs []int) ([]int, error) {
		once.Do(func() {
			close(first)
			<-gate
		})
		mu.Lock()
		groups = append(groups, append([]int(nil), qs...))
		mu.Unlock()
		out := make([]int, len(qs))
		for i, q := range qs {
			out[i] = q * 10
		}
		return out, nil
	}}
	const n = 6
	got := make([]int, n)
	var wg sync.WaitGroup
	call := func(i int) {
		defer wg.Done()
		r, err := b.do(i)
		require.NoError(t, err)
		got[i] = r
	}
	wg.Add(1)
	go call(0)
	<-first
	for i := 1; i < n; i++ {
		wg.Add(1)
		go call(i)
	}
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.queue) == n-1
	}, 5*time.Second, time.Millisecond)
	close(gate)
	wg.Wait()
	require.Equal(t, []int{0, 10, 20, 30, 40, 50}, got)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, groups, 3, "one call alone, then the five waiting ones in groups of at most 3: %v", groups)
	require.Equal(t, []int{0}, groups[0])
	require.Len(t, groups[1], 3)
	require.Len(t, groups[2], 2)
	b.mu.Lock()
	require.False(t, b.running, "idle after the last group")
	b.mu.Unlock()
}

// A failed group fails each of its calls; the next call runs afresh.
func TestBatcherError(t *testing.T) {
	t.Parallel()
	boom := errors.New("store down")
	fail := true
	b := &batcher[int, int]{max: 10, timeout: time.Second, run: func(_ context.Context, qs []int) ([]int, error) {
		if fail {
			return nil, boom
		}
		return qs, nil
	}}
	_, err := b.do(1)
	require.ErrorIs(t, err, boom)
	fail = false
	r, err := b.do(2)
	require.NoError(t, err)
	require.Equal(t, 2, r)
}
