// Package testenv gives integration tests their services: a PostgreSQL
// database and a RabbitMQ name prefix of their own, cleaned up afterwards.
//
// A test that needs a service skips when its URL is unset, and fails instead
// when HERALD_REQUIRE_SERVICES=1 (set by make test and CI), so that a missing
// service can never pass unnoticed.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/proctest"
)

// Variables naming the services tests use.
const (
	PostgresVar = "HERALD_TEST_POSTGRES_URL" // e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
	AMQPVar     = "HERALD_TEST_AMQP_URL"     // e.g. amqp://guest:guest@127.0.0.1:5672/
	// PgBouncerVar names a PgBouncer in transaction mode in front of
	// PostgresVar's server (scripts/services.sh starts one).
	PgBouncerVar = "HERALD_TEST_PGBOUNCER_URL" // e.g. postgres://postgres@127.0.0.1:6432/postgres?sslmode=disable
	RequireVar   = "HERALD_REQUIRE_SERVICES"
	// LongVar, set to 1 (make test-long), runs the suites that make test
	// runs in part, whole.
	LongVar = "HERALD_TEST_LONG"
)

// Long reports whether LongVar asks for the whole of the suites that make
// test runs in part.
func Long() bool { return os.Getenv(LongVar) == "1" }

// Require returns the value of the variable, or skips the test (fails it
// when services are required).
func Require(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		if os.Getenv(RequireVar) == "1" {
			t.Fatalf("%s is unset and %s=1: this integration test must run", name, RequireVar)
		}
		t.Skipf("%s is unset; set it to run this integration test", name)
	}
	return v
}

// Suffix returns a short random name part, unique per call.
func Suffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// PostgresURL creates a fresh, empty database for the test and returns its
// URL. The database is dropped when the test ends.
func PostgresURL(t testing.TB) string {
	t.Helper()
	admin := Require(t, PostgresVar)
	name := "herald_test_" + Suffix()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connect to %s: %v", PostgresVar, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() { dropDatabase(t, admin, name) })
	return databaseURL(t, admin, name)
}

// dropDatabase drops the test database name, whoever is still connected.
func dropDatabase(t testing.TB, admin, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Logf("drop test database %s: %v", name, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		t.Logf("drop test database %s: %v", name, err)
	}
}

// databaseURL is the admin URL with its database replaced by name.
func databaseURL(t testing.TB, admin, name string) string {
	t.Helper()
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("parse %s: %v", PostgresVar, err)
	}
	u.Path = "/" + name
	return u.String()
}

// PgBouncerURL returns the URL of the database dbURL names (one of
// PostgresURL's) through the PgBouncer that PgBouncerVar names: its host,
// port, user and parameters, dbURL's database.
func PgBouncerURL(t testing.TB, dbURL string) string {
	t.Helper()
	u, err := url.Parse(Require(t, PgBouncerVar))
	if err != nil {
		t.Fatalf("parse %s: %v", PgBouncerVar, err)
	}
	d, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("parse database url: %v", err)
	}
	u.Path = d.Path
	return u.String()
}

// AMQP returns the broker URL and a name prefix unique to the test, for the
// transport's Prefix setting, so that tests running side by side never share
// an exchange or a queue. The caller deletes what it declared.
func AMQP(t testing.TB) (amqpURL, prefix string) {
	t.Helper()
	amqpURL = Require(t, AMQPVar)
	return amqpURL, "t" + Suffix() + "."
}

// Vhost creates a RabbitMQ virtual host for the test (through rabbitmqctl,
// which must be on PATH), grants the URL's user all rights on it, and returns
// the broker URL pointing at it. The vhost, with everything in it, is deleted
// when the test ends. herald's processes declare the contract's fixed names;
// a vhost of their own keeps tests running side by side apart.
func Vhost(t testing.TB) string {
	t.Helper()
	base := Require(t, AMQPVar)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", AMQPVar, err)
	}
	user := u.User.Username()
	if user == "" {
		user = "guest"
	}
	name := "herald-test-" + Suffix()
	rabbitmqctl(t, "add_vhost", name)
	t.Cleanup(func() { rabbitmqctl(t, "delete_vhost", name) })
	rabbitmqctl(t, "set_permissions", "-p", name, user, ".*", ".*", ".*")
	u.Path = "/" + name
	return u.String()
}

func rabbitmqctl(t testing.TB, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := proctest.Rabbitmqctl(ctx, args...); err != nil {
		t.Fatal(err)
	}
}

// Waited is how long passed from from to to (two readings of time.Now) by
// whichever of the machine's two clocks says longer: the monotonic one,
// which a broker's timer follows, or the wall clock, which a due time kept
// in a database follows. A test that a delayed delivery never comes early
// checks Waited against the delay: a step of the wall clock (this machine's
// jumped about 9 ms forward during a 2 s park, and a due time in SQLite and
// PostgreSQL came "early" by that much on the monotonic clock) shortens one
// reading, never both, while a delivery that really came early is short on
// both.
func Waited(from, to time.Time) time.Duration {
	return max(to.Sub(from), to.Round(0).Sub(from.Round(0)))
}

// NotBefore is the least Waited a delay d may show when another process's
// timer measures it: d less 1% (and 5 ms). A broker keeps its own time:
// after a step of the machine's wall clock, Erlang (RabbitMQ) corrects its
// time gradually, running up to 1% fast, and a 2 s TTL of a quorum queue
// was seen to end 16 ms early on both of this process's clocks. A delivery
// that really came early (at once, or by a fraction of its wait) is still
// caught.
func NotBefore(d time.Duration) time.Duration {
	return d - d/100 - 5*time.Millisecond
}
