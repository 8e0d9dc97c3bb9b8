package relay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
)

// fakeSource hands out a fixed batch and remembers what was marked; the
// store conformance suite proves the stores' lease and settlement. This
// checks the relay's own logic: what counts as a failure, and the
// metrics.
type fakeSource struct {
	batch  []notify.Event
	marked []int64
}

func (s *fakeSource) LeaseRelay(context.Context, int, []string, string, time.Duration) ([]notify.Event, error) {
	return s.batch, nil
}

func (s *fakeSource) SettleRelay(_ context.Context, mark, _ []notify.OutboxKey, _ string) error {
	for _, k := range mark {
		s.marked = append(s.marked, k.ID)
	}
	return nil
}

type fakePublisher struct {
	confirm int
	err     error
}

func (p fakePublisher) Publish(_ context.Context, events []notify.Event) ([]int64, error) {
	var ids []int64
	for _, e := range events[:p.confirm] {
		ids = append(ids, e.ID)
	}
	return ids, p.err
}

func TestRunOnce(t *testing.T) {
	t.Parallel()
	batch := []notify.Event{{ID: 1}, {ID: 2}, {ID: 3}}
	tests := []struct {
		name      string
		batch     []notify.Event
		pub       fakePublisher
		wantErr   bool
		marked    []int64
		published float64
		failures  float64
	}{
		{"all confirmed", batch, fakePublisher{confirm: 3}, false, []int64{1, 2, 3}, 3, 0},
		{"some unconfirmed is a failure", batch, fakePublisher{confirm: 2}, true, []int64{1, 2}, 2, 1},
		{"broker error", batch, fakePublisher{confirm: 1, err: errors.New("channel closed")}, true, []int64{1}, 1, 1},
		{"empty outbox", nil, fakePublisher{}, false, nil, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			src := &fakeSource{batch: tt.batch}
			reg := prometheus.NewRegistry()
			r, err := relay.New(src, tt.pub, nil, relay.Config{Registerer: reg})
			require.NoError(t, err)
			n, err := r.RunOnce(context.Background())
			require.Equal(t, len(tt.batch), n)
			require.Equal(t, tt.wantErr, err != nil, "err: %v", err)
			require.Equal(t, tt.marked, src.marked)
			got, err := testutil.GatherAndCount(reg, "herald_relay_published_total")
			require.NoError(t, err)
			require.Equal(t, 1, got)
			mfs, err := reg.Gather()
			require.NoError(t, err)
			values := map[string]float64{}
			for _, mf := range mfs {
				values[mf.GetName()] = mf.GetMetric()[0].GetCounter().GetValue()
			}
			require.Equal(t, tt.published, values["herald_relay_published_total"])
			require.Equal(t, tt.failures, values["herald_relay_publish_failures_total"])
		})
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := relay.New(&fakeSource{}, fakePublisher{}, nil, relay.Config{Batch: -1})
	require.Error(t, err)
}
