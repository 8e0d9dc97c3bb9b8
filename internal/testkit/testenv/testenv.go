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
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/testkit/proctest"
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

// Vhost creates a RabbitMQ virtual host for the test, grants the URL's
// user all rights on it, and returns the broker URL pointing at it. The
// vhost, with everything in it, is deleted after the test ends. herald's
// processes declare the contract's fixed names; a vhost of their own keeps
// tests running side by side apart.
//
// rabbitmqctl (which must be on PATH) spends about a second of CPU and
// three of wall time starting, whatever it does, and a vhost took three
// calls (add, permissions, delete): nine seconds of every end-to-end test.
// So the vhosts are made vhostBatch at a time in one call, and deleted a
// batch at a time in one call after their tests end; a package whose
// tests use Vhost calls DeleteVhosts from TestMain, after m.Run, for the
// last ones.
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
	name, err := vhosts.take(user)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := vhosts.release(name); err != nil {
			t.Error(err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

// DeleteVhosts deletes the vhosts Vhost made that remain: those of tests
// that ended since the last batch was deleted, and those made but not
// handed out.
func DeleteVhosts() error { return vhosts.flush() }

// vhostBatch is how many vhosts one rabbitmqctl call makes or deletes.
const vhostBatch = 4

var vhosts vhostPool

// vhostPool holds the vhosts made and not yet handed out (free), and those
// whose tests ended (done).
type vhostPool struct {
	mu   sync.Mutex
	user string
	free []string
	done []string
}

func (p *vhostPool) take(user string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.user != "" && p.user != user {
		return "", fmt.Errorf("vhosts for user %q, but %s names %q", p.user, AMQPVar, user)
	}
	if len(p.free) == 0 {
		names := make([]string, vhostBatch)
		for i := range names {
			names[i] = "herald-test-" + Suffix()
		}
		if err := addVhosts(user, names); err != nil {
			return "", err
		}
		p.user, p.free = user, names
	}
	name := p.free[0]
	p.free = p.free[1:]
	return name, nil
}

func (p *vhostPool) release(name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = append(p.done, name)
	if len(p.done) < vhostBatch {
		return nil
	}
	names := p.done
	p.done = nil
	return deleteVhosts(names)
}

func (p *vhostPool) flush() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	names := append(p.done, p.free...)
	p.done, p.free = nil, nil
	if len(names) == 0 {
		return nil
	}
	return deleteVhosts(names)
}

// erlangName matches the names addVhosts and deleteVhosts put in Erlang
// source unquoted (between <<" and ">>).
var erlangName = regexp.MustCompile(`^[A-Za-z0-9_.@-]+$`)

// addVhosts makes the vhosts and grants user all rights on them, in one
// rabbitmqctl eval when it can; a broker whose internal functions differ
// from those of RabbitMQ 3.8 to 3.13 gets a call per step instead.
func addVhosts(user string, names []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if erlangName.MatchString(user) {
		expr := `lists:foreach(fun(V) -> ok = rabbit_vhost:add(V, <<"herald-tests">>), ` +
			`ok = rabbit_auth_backend_internal:set_permissions(<<"` + user + `">>, V, <<".*">>, <<".*">>, <<".*">>, <<"herald-tests">>) end, ` +
			erlangList(names) + `).`
		if proctest.Rabbitmqctl(ctx, "eval", expr) == nil {
			return nil
		}
	}
	for _, n := range names {
		if err := proctest.Rabbitmqctl(ctx, "add_vhost", n); err != nil {
			return err
		}
		if err := proctest.Rabbitmqctl(ctx, "set_permissions", "-p", n, user, ".*", ".*", ".*"); err != nil {
			return err
		}
	}
	return nil
}

// deleteVhosts deletes the vhosts, in one rabbitmqctl eval when it can.
func deleteVhosts(names []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	expr := `lists:foreach(fun(V) -> ok = rabbit_vhost:delete(V, <<"herald-tests">>) end, ` + erlangList(names) + `).`
	if proctest.Rabbitmqctl(ctx, "eval", expr) == nil {
		return nil
	}
	var errs []error
	for _, n := range names {
		errs = append(errs, proctest.Rabbitmqctl(ctx, "delete_vhost", n))
	}
	return errors.Join(errs...)
}

// erlangList is names as an Erlang list of binaries; every name is one of
// Vhost's, which erlangName matches.
func erlangList(names []string) string {
	var b strings.Builder
	b.WriteString("[")
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(`<<"` + n + `">>`)
	}
	b.WriteString("]")
	return b.String()
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
