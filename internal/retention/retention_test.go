package retention_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/retention"
)

// pruner records the arguments of its last PruneOlderThan.
type pruner struct {
	age   time.Duration
	batch int
}

func (p *pruner) PruneOlderThan(_ context.Context, age time.Duration, batch int) (notify.PruneResult, error) {
	p.age, p.batch = age, batch
	return notify.PruneResult{}, nil
}

func TestConfig(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]retention.Config{
		"negative retention": {Retention: -time.Hour},
		"negative interval":  {Interval: -time.Minute},
		"negative batch":     {Batch: -1},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := retention.New(&pruner{}, cfg)
			require.Error(t, err)
		})
	}

	// A zero retention or batch is not a legal setting: it stands for the
	// default.
	p := &pruner{}
	l, err := retention.New(p, retention.Config{})
	require.NoError(t, err)
	_, err = l.Once(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1000, p.batch)
	require.Equal(t, 168*time.Hour, p.age)

	// The loop hands the store the age, never an instant of its own
	// clock: the store measures it on the database's.
	l, err = retention.New(p, retention.Config{Retention: time.Hour, Batch: 7})
	require.NoError(t, err)
	_, err = l.Once(t.Context())
	require.NoError(t, err)
	require.Equal(t, 7, p.batch)
	require.Equal(t, time.Hour, p.age)
}
