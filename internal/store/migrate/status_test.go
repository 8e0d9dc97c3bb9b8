package migrate_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/store/migrate"
)

func TestStatusAndCheck(t *testing.T) {
	t.Parallel()
	ms := []migrate.Migration{{Version: 1, Name: "init"}, {Version: 2, Name: "ops"}}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

	none := migrate.Status(ms, nil)
	require.Len(t, none, 2)
	require.False(t, none[0].Applied)
	err := migrate.Check(none)
	require.True(t, errors.Is(err, migrate.ErrNotMigrated))
	require.ErrorContains(t, err, "0001_init, 0002_ops")

	partly := migrate.Status(ms, []migrate.Record{{Version: 1, Name: "init", AppliedAt: at}})
	require.True(t, partly[0].Applied)
	require.Equal(t, at, partly[0].AppliedAt)
	require.ErrorContains(t, migrate.Check(partly), "pending: 0002_ops")

	newer := migrate.Status(ms, []migrate.Record{{Version: 1}, {Version: 2}, {Version: 3, Name: "future"}})
	require.NoError(t, migrate.Check(newer))
	require.Len(t, newer, 3)
	require.True(t, newer[2].Unknown)
	require.Equal(t, "0003_future", newer[2].String())
}
