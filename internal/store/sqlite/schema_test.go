package sqlite

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/store/migrate"
)

// A new file reports every migration pending; after Migrate, every one
// applied.
func TestMigrationStatus(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openTemp(t)
	before, err := s.MigrationStatus(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, before)
	require.True(t, errors.Is(migrate.Check(before), migrate.ErrNotMigrated))

	require.NoError(t, s.Migrate(ctx))
	after, err := s.MigrationStatus(ctx)
	require.NoError(t, err)
	require.NoError(t, migrate.Check(after))
	for _, st := range after {
		require.True(t, st.Applied, st.String())
		require.False(t, st.AppliedAt.IsZero(), st.String())
	}
}
