// Package mongotest gives tests a MongoDB server: the one named by
// HERALD_TEST_MONGODB_URL (a mongodb:// URL without a database), or else one
// embedded FerretDB (v1, SQLite handler, in a temporary directory) per test
// binary, started on first use on a loopback port.
package mongotest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
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
		baseURI, initErr = StartFerret(context.Background(), "")
	})
	if initErr != nil {
		t.Fatalf("start embedded FerretDB: %v", initErr)
	}
	return baseURI
}

// StartFerret runs an embedded FerretDB on addr (127.0.0.1:0 when empty)
// over SQLite files in a new temporary directory until ctx ends, and
// returns its base URI (mongodb://host:port/).
func StartFerret(ctx context.Context, addr string) (string, error) {
	dir, err := os.MkdirTemp("", "herald-ferretdb-")
	if err != nil {
		return "", err
	}
	return StartFerretIn(ctx, addr, dir)
}

// StartFerretIn is StartFerret over the SQLite files in dir (kept: a
// restarted server finds its data).
func StartFerretIn(ctx context.Context, addr, dir string) (string, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: addr},
		Handler:   "sqlite",
		SQLiteURL: "file:" + dir + "/",
		// FerretDB logs every failed command at WARN with its whole
		// message; a duplicate key is an answer here, not a problem.
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return "", err
	}
	go func() { _ = f.Run(ctx) }()
	return f.MongoDBURI(), nil
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
