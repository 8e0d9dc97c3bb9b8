package migrate_test

import (
	"context"
	"errors"
	"testing"
	"testing/fstest"
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

func TestReport(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fsys := fstest.MapFS{"m/0001_init.sql": {Data: []byte("A")}, "m/0002_ops.sql": {Data: []byte("B")}}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

	states, err := migrate.Report(ctx, fsys, "m", func(context.Context) ([]migrate.Record, error) {
		return []migrate.Record{{Version: 1, Name: "init", AppliedAt: at}}, nil
	})
	require.NoError(t, err)
	require.Len(t, states, 2)
	require.True(t, states[0].Applied)
	require.Equal(t, at, states[0].AppliedAt)
	require.False(t, states[1].Applied)
	require.Equal(t, "0002_ops", states[1].String())

	unread := errors.New("read schema_migrations: down")
	_, err = migrate.Report(ctx, fsys, "m", func(context.Context) ([]migrate.Record, error) { return nil, unread })
	require.Equal(t, unread, err, "the records' error as it is")

	read := false
	_, err = migrate.Report(ctx, fstest.MapFS{"m/0001.sql": {}}, "m", func(context.Context) ([]migrate.Record, error) {
		read = true
		return nil, nil
	})
	require.ErrorContains(t, err, "NNNN_name.sql")
	require.False(t, read, "a malformed migration fails before the database is read")
}
