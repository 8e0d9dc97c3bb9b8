package reconcile

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// fakeStore hands out the ids of batches in turn; the real stores are
// tested by storetest.
type fakeStore struct {
	mu      sync.Mutex
	batches [][]int64
	calls   []time.Duration
	err     error
}

func (f *fakeStore) Reconcile(_ context.Context, after time.Duration, limit int) ([]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, after)
	if f.err != nil {
		return nil, f.err
	}
	if len(f.batches) == 0 {
		return nil, nil
	}
	b := f.batches[0]
	f.batches = f.batches[1:]
	if len(b) > limit {
		panic("batch over limit")
	}
	return b, nil
}

// A pass repeats while batches come back full, counts every id, and asks
// for what went quiet After ago.
func TestOnceCountsAndRepeats(t *testing.T) {
	t.Parallel()
	st := &fakeStore{batches: [][]int64{{1, 2}, {3, 4}, {5}}}
	reg := prometheus.NewRegistry()
	r, err := New(st, Config{After: time.Hour, Batch: 2, Registerer: reg})
	require.NoError(t, err)
	ids, err := r.Once(t.Context())
	require.NoError(t, err)
	require.Equal(t, []int64{1, 2, 3, 4, 5}, ids)
	require.Equal(t, []time.Duration{time.Hour, time.Hour, time.Hour}, st.calls,
		"the store gets the duration, to measure on the database's clock")
	require.InDelta(t, 5, testutil.ToFloat64(r.reconciled), 0)
}

func TestOnceReportsStoreErrors(t *testing.T) {
	t.Parallel()
	r, err := New(&fakeStore{err: errors.New("down")}, Config{After: time.Minute})
	require.NoError(t, err)
	_, err = r.Once(t.Context())
	require.ErrorContains(t, err, "down")
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{{}, {After: -time.Second}, {After: time.Second, Interval: -1}, {After: time.Second, Batch: -1}} {
		_, err := New(&fakeStore{}, c)
		require.Error(t, err, "%+v", c)
	}
}
