package postgres

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/store/migrate"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// An empty database reports every migration pending, without creating
// schema_migrations; after Migrate, every one applied.
func TestMigrationStatus(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := Open(ctx, testenv.PostgresURL(t), Config{})
	require.NoError(t, err)
	t.Cleanup(s.Close)

	before, err := s.MigrationStatus(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, before)
	require.True(t, errors.Is(migrate.Check(before), migrate.ErrNotMigrated))
	for _, st := range before {
		require.False(t, st.Applied, st.String())
	}
	require.Zero(t, count(t, s, `SELECT count(*) FROM pg_tables WHERE tablename = 'schema_migrations' AND schemaname = current_schema()`))

	require.NoError(t, s.Migrate(ctx))
	after, err := s.MigrationStatus(ctx)
	require.NoError(t, err)
	require.NoError(t, migrate.Check(after))
	require.Len(t, after, len(before))
	for _, st := range after {
		require.True(t, st.Applied, st.String())
		require.False(t, st.AppliedAt.IsZero(), st.String())
	}
}
