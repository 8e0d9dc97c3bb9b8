package monitor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRule(t *testing.T) {
	t.Parallel()
	type step struct {
		at    time.Duration // since the start
		value int64
		want  transition
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"never above", []step{{0, 0, steady}, {10 * time.Minute, 100, steady}}},
		{"at the threshold is not above", []step{{0, 100, steady}, {time.Hour, 100, steady}}},
		{"above for less than For", []step{{0, 101, steady}, {4 * time.Minute, 500, steady}, {299 * time.Second, 101, steady}}},
		{"fires once For has passed since the first sample above", []step{
			{0, 101, steady}, {time.Minute, 150, steady}, {5 * time.Minute, 150, fired},
		}},
		{"fires late when samples are sparse", []step{{0, 101, steady}, {7 * time.Minute, 101, fired}}},
		{"a sample at the threshold resets the count", []step{
			{0, 150, steady}, {4 * time.Minute, 100, steady}, {5 * time.Minute, 150, steady},
			{9 * time.Minute, 150, steady}, {10 * time.Minute, 150, fired},
		}},
		{"fires once while firing", []step{
			{0, 200, steady}, {5 * time.Minute, 200, fired}, {6 * time.Minute, 300, steady}, {time.Hour, 101, steady},
		}},
		{"resolves once at or below the threshold", []step{
			{0, 200, steady}, {5 * time.Minute, 200, fired}, {6 * time.Minute, 100, resolved},
			{7 * time.Minute, 3, steady}, {8 * time.Minute, 0, steady},
		}},
		{"fires again only after a full For", []step{
			{0, 200, steady}, {5 * time.Minute, 200, fired}, {6 * time.Minute, 50, resolved},
			{7 * time.Minute, 200, steady}, {11 * time.Minute, 200, steady}, {12 * time.Minute, 200, fired},
		}},
		{"below without firing resolves nothing", []step{{0, 200, steady}, {time.Minute, 0, steady}}},
	}
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := rule{threshold: 100, hold: 5 * time.Minute}
			for i, s := range tt.steps {
				require.Equal(t, s.want, r.observe(start.Add(s.at), s.value), "step %d (%s, %d)", i, s.at, s.value)
			}
		})
	}
}
