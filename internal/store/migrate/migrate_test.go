package migrate_test

import (
	"context"
	"errors"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/store/migrate"
)

func TestLoad(t *testing.T) {
	t.Parallel()
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	for _, tc := range []struct {
		name    string
		files   fstest.MapFS
		want    []migrate.Migration
		wantErr string
	}{
		{
			name: "in version order",
			files: fstest.MapFS{
				"m/0002_ops.sql":   file("B"),
				"m/0001_init.sql":  file("A"),
				"m/README.md":      file("not a migration"),
				"other/0003_x.sql": file("elsewhere"),
			},
			want: []migrate.Migration{{Version: 1, Name: "init", SQL: "A"}, {Version: 2, Name: "ops", SQL: "B"}},
		},
		{name: "empty", files: fstest.MapFS{}, want: []migrate.Migration{}},
		{name: "no name", files: fstest.MapFS{"m/0001.sql": file("")}, wantErr: "NNNN_name.sql"},
		{name: "empty name", files: fstest.MapFS{"m/0001_.sql": file("")}, wantErr: "NNNN_name.sql"},
		{name: "not a number", files: fstest.MapFS{"m/init_0001.sql": file("")}, wantErr: "NNNN_name.sql"},
		{name: "zero", files: fstest.MapFS{"m/0000_init.sql": file("")}, wantErr: "NNNN_name.sql"},
		{name: "short number", files: fstest.MapFS{"m/1_init.sql": file("")}, wantErr: "NNNN_name.sql"},
		{name: "sign", files: fstest.MapFS{"m/+001_init.sql": file("")}, wantErr: "NNNN_name.sql"},
		{
			name:    "duplicate version",
			files:   fstest.MapFS{"m/0001_init.sql": file(""), "m/0001_again.sql": file("")},
			wantErr: "share version 1",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := migrate.Load(tc.files, "m")
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// fakeEngine is a database whose schema is a list of executed statements.
type fakeEngine struct {
	applied   map[int]string
	executed  []string
	failOn    string
	committed bool
}

type fakeTx struct {
	e        *fakeEngine
	applied  map[int]string
	executed []string
}

func (e *fakeEngine) Begin(context.Context) (migrate.Tx, error) {
	tx := &fakeTx{e: e, applied: map[int]string{}, executed: append([]string(nil), e.executed...)}
	for v, n := range e.applied {
		tx.applied[v] = n
	}
	return tx, nil
}

func (tx *fakeTx) Applied(_ context.Context, v int) (bool, error) {
	_, ok := tx.applied[v]
	return ok, nil
}

func (tx *fakeTx) Exec(_ context.Context, sql string) error {
	if sql == tx.e.failOn {
		return errors.New("syntax error")
	}
	tx.executed = append(tx.executed, sql)
	return nil
}

func (tx *fakeTx) Record(_ context.Context, m migrate.Migration) error {
	tx.applied[m.Version] = m.Name
	return nil
}

func (tx *fakeTx) Commit(context.Context) error {
	tx.e.applied, tx.e.executed, tx.e.committed = tx.applied, tx.executed, true
	return nil
}

func (tx *fakeTx) Rollback() {}

func TestRun(t *testing.T) {
	t.Parallel()
	ms := []migrate.Migration{{Version: 1, Name: "init", SQL: "A"}, {Version: 2, Name: "ops", SQL: "B"}}
	ctx := t.Context()

	e := &fakeEngine{applied: map[int]string{1: "init"}, executed: []string{"A"}}
	require.NoError(t, migrate.Run(ctx, e, ms))
	require.Equal(t, []string{"A", "B"}, e.executed, "only the migration not recorded runs")
	require.Equal(t, map[int]string{1: "init", 2: "ops"}, e.applied)

	// A second run changes nothing.
	require.NoError(t, migrate.Run(ctx, e, ms))
	require.Equal(t, []string{"A", "B"}, e.executed)

	// A failure commits nothing: the earlier migration of the run is
	// rolled back with it.
	e = &fakeEngine{applied: map[int]string{}, failOn: "B"}
	err := migrate.Run(ctx, e, ms)
	require.ErrorContains(t, err, "apply 0002_ops")
	require.False(t, e.committed)
	require.Empty(t, e.executed)
}
