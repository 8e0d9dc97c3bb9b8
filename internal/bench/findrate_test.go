package bench_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/bench"
)

func TestJudge(t *testing.T) {
	t.Parallel()
	ok := bench.Result{Accepted: 100, Window: time.Second, AcceptedInWindow: 100, DeliveredInWindow: 98, E2EP99: 200 * time.Millisecond}
	for _, tc := range []struct {
		name  string
		edit  func(*bench.Result)
		holds bool
		why   string
	}{
		{"keeps up", func(*bench.Result) {}, true, ""},
		{"falls behind", func(r *bench.Result) { r.DeliveredInWindow = 90 }, false, "delivered 90.0/s"},
		{"slow", func(r *bench.Result) { r.E2EP99 = 1200 * time.Millisecond }, false, "e2e p99 1.2s"},
		{"rejects", func(r *bench.Result) { r.Rejected = map[int]int{http.StatusServiceUnavailable: 2} }, false, "2 creates rejected"},
		{"backlog", func(r *bench.Result) {
			r.Window, r.AcceptedInWindow, r.DeliveredInWindow = 10*time.Second, 1000, 960
		}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := ok
			tc.edit(&res)
			p := bench.Judge(100, res)
			require.Equal(t, tc.holds, p.Holds, p.Why)
			require.Contains(t, p.Why, tc.why)
		})
	}
	// A backlog of more than a second's arrivals fails even when the
	// deliveries reach 0.95x the rate.
	p := bench.Judge(10, bench.Result{Window: 100 * time.Second, AcceptedInWindow: 1000, DeliveredInWindow: 985})
	require.False(t, p.Holds)
	require.Contains(t, p.Why, "backlog 15")
}

// capacity is a stack that holds every rate up to its capacity.
func capacity(c float64) func(context.Context, float64) (bench.Probe, error) {
	return func(_ context.Context, rate float64) (bench.Probe, error) {
		return bench.Probe{Rate: rate, Holds: rate <= c}, nil
	}
}

func TestFindRate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		start, cap float64
		probes     []float64
	}{
		{"brackets up then bisects", 100, 730, []float64{100, 200, 400, 800, 600, 700, 750}},
		{"brackets down when the start fails", 100, 30, []float64{100, 50, 25, 38, 32, 29, 31}},
		{"nothing holds", 4, 0.5, []float64{4, 2, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var seen []float64
			s, err := bench.FindRate(t.Context(), bench.FindRateConfig{Start: tc.start, Window: time.Millisecond, Budget: time.Minute},
				capacity(tc.cap), func(p bench.Probe) { seen = append(seen, p.Rate) })
			require.NoError(t, err)
			require.True(t, s.Complete)
			require.Equal(t, tc.probes, seen)
			require.Len(t, s.Probes, len(tc.probes))
			require.LessOrEqual(t, s.SustainableRate, tc.cap)
			require.Greater(t, s.LowestFailing, tc.cap)
			if s.SustainableRate > 0 {
				require.LessOrEqual(t, s.LowestFailing, 1.1*s.SustainableRate, "within 10%%")
			}
		})
	}
}

func TestFindRateBudget(t *testing.T) {
	t.Parallel()
	// A budget shorter than one window runs no probe and says so.
	s, err := bench.FindRate(t.Context(), bench.FindRateConfig{Window: time.Minute, Budget: time.Second}, capacity(100), nil)
	require.NoError(t, err)
	require.False(t, s.Complete)
	require.Empty(t, s.Probes)
	require.Contains(t, s.Notes[0], "budget")
	// A probe cut short by the budget ends the search with what it has.
	s, err = bench.FindRate(t.Context(), bench.FindRateConfig{Window: time.Millisecond, Budget: 50 * time.Millisecond},
		func(ctx context.Context, rate float64) (bench.Probe, error) {
			if rate > 100 {
				<-ctx.Done()
				return bench.Probe{}, ctx.Err()
			}
			return bench.Probe{Rate: rate, Holds: true}, nil
		}, nil)
	require.NoError(t, err)
	require.False(t, s.Complete)
	require.Equal(t, 100.0, s.SustainableRate)
	require.Contains(t, s.Notes[0], "during the probe at 200.0/s")
	// Any other failure is an error.
	_, err = bench.FindRate(t.Context(), bench.FindRateConfig{}, func(context.Context, float64) (bench.Probe, error) {
		return bench.Probe{}, errors.New("stalled")
	}, nil)
	require.ErrorContains(t, err, "stalled")
}
