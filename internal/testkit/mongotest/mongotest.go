// Package mongotest gives tests a MongoDB server: the one named by
// HERALD_TEST_MONGODB_URL (a mongodb:// URL without a database), or else one
// embedded FerretDB (v1, SQLite handler, in a temporary directory) per test
// binary, started on first use on a loopback port.
package mongotest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/FerretDB/FerretDB/ferretdb"
)

var (
	once    sync.Once
	baseURI string
	initErr error
)

// Server returns the base URI of the test server (no database), starting
// the embedded FerretDB on first use. It lives until the test binary exits.
func Server(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		if u := os.Getenv("HERALD_TEST_MONGODB_URL"); u != "" {
			baseURI = strings.TrimSuffix(u, "/") + "/"
			return
		}
		var f *Ferret
		if f, initErr = StartFerret("", ""); initErr == nil {
			baseURI = f.URI
		}
	})
	if initErr != nil {
		t.Fatalf("start embedded FerretDB: %v", initErr)
	}
	return baseURI
}

// Ferret is an embedded FerretDB server.
type Ferret struct {
	// URI is its base URI, mongodb://host:port/.
	URI    string
	cancel context.CancelFunc
	done   chan struct{}
}

// StartFerret runs an embedded FerretDB on addr (127.0.0.1:0 when empty)
// over the SQLite files in dir (a new temporary directory when empty; a
// restarted server on the same dir finds its data) until Stop.
func StartFerret(addr, dir string) (*Ferret, error) { return StartFerretOn(addr, dir, "") }

// StartFerretOn is StartFerret with FerretDB's PostgreSQL handler on the
// database pgURL names when pgURL is not empty (dir is then unused). It is
// the faster backend: FerretDB v1's SQLite handler reads a whole
// collection for every lookup, even by _id.
func StartFerretOn(addr, dir, pgURL string) (*Ferret, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if dir == "" && pgURL == "" {
		var err error
		if dir, err = os.MkdirTemp("", "herald-ferretdb-"); err != nil {
			return nil, err
		}
	}
	cfg := &ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: addr},
		Handler:   "sqlite",
		SQLiteURL: "file:" + dir + "/",
		// FerretDB logs every failed command at WARN with its whole
		// message; a duplicate key is an answer here, not a problem.
		Logger: slog.New(slog.DiscardHandler),
	}
	if pgURL != "" {
		cfg.Handler, cfg.SQLiteURL, cfg.PostgreSQLURL = "postgresql", "", pgURL
	}
	f, err := ferretdb.New(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	fd := &Ferret{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(fd.done)
		_ = f.Run(ctx)
	}()
	fd.URI = f.MongoDBURI()
	return fd, nil
}

// Stop stops the server (its connections are closed) and waits for it.
func (f *Ferret) Stop() {
	f.cancel()
	<-f.done
}

// URL returns a mongodb:// URL on the test server naming a database of its
// own for t (dropped by nobody: the server's files are temporary).
func URL(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	base := Server(t)
	q := ""
	if i := strings.Index(base, "?"); i >= 0 {
		base, q = base[:i], base[i:]
	}
	return strings.TrimSuffix(base, "/") + "/herald_" + hex.EncodeToString(b) + q
}
