package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/store"
	"github.com/heraldhq/herald/internal/store/sqlite"
	"github.com/heraldhq/herald/internal/store/storetest"
)

// The engine implements the whole store contract.
var _ store.Store = (*sqlite.Store)(nil)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		s, path := setup(t)
		return storetest.Harness{Store: s, Count: counter(t, path), SingleWriter: true}
	})
}

// setup opens a migrated store on a fresh file, closed when the test ends.
func setup(t testing.TB) (*sqlite.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "herald.db")
	s := open(t, path, sqlite.Config{})
	require.NoError(t, s.Migrate(t.Context()))
	return s, path
}

// open opens a store on path, closed when the test ends.
func open(t testing.TB, path string, cfg sqlite.Config) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), path, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// raw opens a plain connection pool on the file, as the sqlite3 shell would,
// to look at rows independently of the store.
func raw(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

// counter returns a row counter for the harness.
func counter(t testing.TB, path string) func(testing.TB, string) int {
	db := raw(t, path)
	return func(t testing.TB, table string) int {
		t.Helper()
		switch table {
		case "notifications", "outbox", "processed_messages":
		default:
			t.Fatalf("count: unknown table %q", table)
		}
		var n int
		require.NoError(t, db.QueryRowContext(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
		return n
	}
}
