// Package pgtest gives a test a migrated herald PostgreSQL database of its
// own, copied from a template migrated once (testenv.PostgresSchemaURL).
package pgtest

import (
	"context"
	"testing"

	"github.com/heraldhq/herald/internal/store/postgres"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// URL creates a database for the test holding the schema of every
// migration this build carries, as postgres.Store.Migrate leaves it, and
// returns its URL. It is dropped when the test ends. A test of the
// migrations themselves wants testenv.PostgresURL's empty database.
func URL(t testing.TB) string {
	t.Helper()
	return testenv.PostgresSchemaURL(t, Schema())
}

// Schema is the migrated herald schema, for testenv.PostgresSchemaURL.
func Schema() testenv.Schema {
	return testenv.Schema{
		Fingerprint: postgres.MigrationsDigest(),
		Build: func(ctx context.Context, url string) error {
			s, err := postgres.Open(ctx, url, postgres.Config{MaxConns: 1})
			if err != nil {
				return err
			}
			defer s.Close()
			return s.Migrate(ctx)
		},
	}
}
