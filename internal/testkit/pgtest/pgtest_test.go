package pgtest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/store/migrate"
	"github.com/heraldhq/herald/internal/store/postgres"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// A copy holds every migration, and is the test's own: what one test
// writes, another's copy does not hold.
func TestURL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, b := URL(t), URL(t)
	require.NotEqual(t, a, b)
	for _, u := range []string{a, b} {
		s, err := postgres.Open(ctx, u, postgres.Config{})
		require.NoError(t, err)
		st, err := s.MigrationStatus(ctx)
		s.Close()
		require.NoError(t, err)
		require.NoError(t, migrate.Check(st), "a copy is migrated")
	}
	exec(t, a, `INSERT INTO schema_migrations (version, name) VALUES (100000, 'only in a')`)
	require.Equal(t, 1, count(t, a, `SELECT count(*) FROM schema_migrations WHERE version = 100000`))
	require.Zero(t, count(t, b, `SELECT count(*) FROM schema_migrations WHERE version = 100000`))
}

// Tests that ask at once for a schema no template holds yet build it once
// between them, and each gets a copy; a template refuses connections.
func TestPostgresSchemaURLBuildsOnce(t *testing.T) {
	t.Parallel()
	fp := testenv.Suffix() // a schema of its own: its template is new
	var builds atomic.Int32
	schema := testenv.Schema{
		Fingerprint: fp,
		Build: func(ctx context.Context, url string) error {
			builds.Add(1)
			return Schema().Build(ctx, url)
		},
	}
	t.Cleanup(func() {
		admin := testenv.Require(t, testenv.PostgresVar)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		require.NoError(t, err)
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE $1`, "herald_tpl_"+fp+"_%")
		require.NoError(t, err)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Len(t, names, 1, "one template, no unfinished build left")
		_, err = conn.Exec(ctx, "DROP DATABASE "+pgx.Identifier{names[0]}.Sanitize())
		require.NoError(t, err)
	})
	t.Run("group", func(t *testing.T) {
		for range 6 {
			t.Run("copy", func(t *testing.T) {
				t.Parallel()
				u := testenv.PostgresSchemaURL(t, schema)
				require.Equal(t, 1, count(t, u, `SELECT count(*) FROM pg_tables WHERE tablename = 'schema_migrations'`))
			})
		}
	})
	require.EqualValues(t, 1, builds.Load())
}

func exec(t *testing.T, u, sql string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), u)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(t.Context(), sql)
	require.NoError(t, err)
}

func count(t *testing.T, u, sql string) int {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), u)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var n int
	require.NoError(t, conn.QueryRow(t.Context(), sql).Scan(&n))
	return n
}
