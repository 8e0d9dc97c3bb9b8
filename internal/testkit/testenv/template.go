package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Schema is what a test database starts with when PostgresSchemaURL makes
// it: a copy of a template database that Build brought to the schema once.
type Schema struct {
	// Fingerprint names the schema Build makes, a hash of its sources
	// (the migration files): a change to them must change it, so that a
	// template made by older sources is never used. Hex digits only.
	Fingerprint string
	// Build brings the empty database at url to the schema and closes
	// every connection it opened to it.
	Build func(ctx context.Context, url string) error
}

// templatePrefix starts the name of every template database
// PostgresSchemaURL makes: herald_tpl_<fingerprint>_<UTC day>[_b], the _b
// one while it is being built.
const templatePrefix = "herald_tpl_"

// templateName matches the names templatePrefix starts.
var templateName = regexp.MustCompile(`^herald_tpl_[0-9a-f]+_([0-9]{8})(_b)?$`)

// templateLockKey is the session advisory lock, on the admin database, that
// keeps the builds of templates of several test processes apart ("htpl"
// in ASCII): the second one waits, then finds the template made.
const templateLockKey = 0x6874_706c

// sqlstates PostgresSchemaURL retries on.
const (
	objectInUse    = "55006" // source database "x" is being accessed by other users
	invalidCatalog = "3D000" // template database "x" does not exist
)

// PostgresSchemaURL is PostgresURL with the database made as a copy of a
// template that holds schema (CREATE DATABASE ... TEMPLATE): a test that
// wants a migrated database gets one for the price of a create, instead of
// running every migration again. Tests of the migrations themselves use
// PostgresURL.
//
// The template is made once per fingerprint and UTC day on the server,
// whichever test process asks first, under a session advisory lock that the
// test binaries running at once share. The day is part of its name because
// what Build makes may depend on it (the outbox's partitions of the days
// ahead). Nothing connects to a template (it refuses connections), so a
// copy never finds it in use but for an instant after its build. Templates
// of any fingerprint whose day is before yesterday are dropped when a new
// one is built; a few (one a day per migration set in use) remain.
func PostgresSchemaURL(t testing.TB, schema Schema) string {
	t.Helper()
	admin := Require(t, PostgresVar)
	if !regexp.MustCompile(`^[0-9a-f]{1,32}$`).MatchString(schema.Fingerprint) {
		t.Fatalf("schema fingerprint %q: want 1 to 32 lower-case hex digits", schema.Fingerprint)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connect to %s: %v", PostgresVar, err)
	}
	defer conn.Close(context.Background())

	name := "herald_test_" + Suffix()
	for try := 0; ; try++ {
		tpl := templatePrefix + schema.Fingerprint + "_" + time.Now().UTC().Format("20060102")
		if err := ensureTemplate(ctx, conn, admin, tpl, schema); err != nil {
			t.Fatalf("template database %s: %v", tpl, err)
		}
		err := copyDatabase(ctx, conn, name, tpl)
		if err == nil {
			break
		}
		// Dropped meanwhile (a new day's build cleaned it up): make it again.
		if sqlState(err) == invalidCatalog && try < 3 {
			continue
		}
		t.Fatalf("create test database from %s: %v", tpl, err)
	}
	t.Cleanup(func() { dropDatabase(t, admin, name) })
	return databaseURL(t, admin, name)
}

// ensureTemplate makes the template database tpl unless it exists.
func ensureTemplate(ctx context.Context, conn *pgx.Conn, admin, tpl string, schema Schema) error {
	if ok, err := databaseExists(ctx, conn, tpl); err != nil || ok {
		return err
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(templateLockKey)); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, int64(templateLockKey))
	}()
	// Another process may have made it while this one waited.
	if ok, err := databaseExists(ctx, conn, tpl); err != nil || ok {
		return err
	}
	building := tpl + "_b"
	id := pgx.Identifier{building}.Sanitize()
	// A build that died half-way (its process killed) left this.
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop an unfinished build: %w", err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+id); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	u, err := url.Parse(admin)
	if err != nil {
		return err
	}
	u.Path = "/" + building
	if err := schema.Build(ctx, u.String()); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	// From here on nobody may connect: a copy needs the template unused.
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+id+" WITH ALLOW_CONNECTIONS false"); err != nil {
		return fmt.Errorf("close to connections: %w", err)
	}
	// Build closed its connections, but their server processes end on
	// their own time, and a rename, like a copy, waits for none.
	err = retryInUse(ctx, func() error {
		_, err := conn.Exec(ctx, "ALTER DATABASE "+id+" RENAME TO "+pgx.Identifier{tpl}.Sanitize())
		return err
	})
	if err != nil {
		return fmt.Errorf("rename the build: %w", err)
	}
	dropOldTemplates(ctx, conn, time.Now().UTC().AddDate(0, 0, -1).Format("20060102"))
	return nil
}

// dropOldTemplates drops the templates (of any fingerprint, built or half
// built) of a day before the day keep, best effort: a failure leaves them
// for the next build.
func dropOldTemplates(ctx context.Context, conn *pgx.Conn, keep string) {
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE $1`, templatePrefix+"%")
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, n := range names {
		m := templateName.FindStringSubmatch(n)
		if m == nil || m[1] >= keep {
			continue
		}
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{n}.Sanitize()+" WITH (FORCE)")
	}
}

// copyDatabase creates name as a copy of tpl.
func copyDatabase(ctx context.Context, conn *pgx.Conn, name, tpl string) error {
	return retryInUse(ctx, func() error {
		_, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{tpl}.Sanitize())
		return err
	})
}

// retryInUse runs f until it does not fail for a database in use, which
// lasts only while the server processes of connections just closed end.
func retryInUse(ctx context.Context, f func() error) error {
	wait := 10 * time.Millisecond
	for {
		err := f()
		if sqlState(err) != objectInUse {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

func databaseExists(ctx context.Context, conn *pgx.Conn, name string) (bool, error) {
	var ok bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&ok)
	return ok, err
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
