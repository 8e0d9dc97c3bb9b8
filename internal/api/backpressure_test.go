package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/notify"
)

type fixedStats notify.OutboxStats

func (f fixedStats) OutboxStats(context.Context) (notify.OutboxStats, error) {
	return notify.OutboxStats(f), nil
}

// The gate counts what waits for a delivery: status events waiting for a
// status webhook that is down never turn creates away.
func TestBacklogGateLeavesStatusEventsOut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		stats notify.OutboxStats
		over  bool
	}{
		{notify.OutboxStats{Unprocessed: 5}, false},
		{notify.OutboxStats{Unprocessed: 6}, true},
		{notify.OutboxStats{Unprocessed: 1000, UnprocessedStatus: 995}, false},
		{notify.OutboxStats{Unprocessed: 1000, UnprocessedStatus: 994}, true},
	} {
		err := api.BacklogGate(fixedStats(tc.stats), 5, time.Minute)(t.Context())
		if tc.over {
			require.Error(t, err, "%+v", tc.stats)
		} else {
			require.NoError(t, err, "%+v", tc.stats)
		}
	}
}
