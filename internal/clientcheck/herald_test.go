package clientcheck_test

import (
	"context"
	"database/sql"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/deadletter"
	"github.com/heraldhq/herald/internal/store/sqlite"
)

// token is the API token of the heralds the tests and examples start.
const token = "s3cret"

// herald is a real herald API in this process, over a fresh SQLite file:
// ids start at 1, so that examples print the same output every run.
type herald struct {
	URL  string
	path string
	srv  *httptest.Server
	st   *sqlite.Store
	dir  string
	// shed, while above zero, makes that many creates answer 429 with
	// Retry-After: 1.
	shed atomic.Int32
}

func startHerald() *herald {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "herald-client-")
	if err != nil {
		panic(err)
	}
	h := &herald{dir: dir, path: filepath.Join(dir, "herald.db")}
	st, err := sqlite.Open(ctx, h.path, sqlite.Config{})
	if err != nil {
		panic(err)
	}
	if err := st.Migrate(ctx); err != nil {
		panic(err)
	}
	a, err := api.New(st, api.Config{
		Token:        token,
		DeadLetters:  deadletter.New(st, nil),
		Destinations: st,
		Admission: func(context.Context) error {
			if h.shed.Add(-1) >= 0 {
				return &api.RetryAfterError{After: time.Second}
			}
			h.shed.Store(0)
			return nil
		},
	})
	if err != nil {
		panic(err)
	}
	h.st, h.srv = st, httptest.NewServer(a.Handler())
	h.URL = h.srv.URL
	return h
}

func (h *herald) Close() {
	h.srv.Close()
	_ = h.st.Close()
	_ = os.RemoveAll(h.dir)
}

// fail dead-letters a notification as a worker does after its last try,
// with the attempt it made.
func (h *herald) fail(id int64, reason string) {
	db, err := sql.Open("sqlite", h.path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	now := time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")
	if _, err := db.Exec(`UPDATE notifications SET status = 'failed', attempts = attempts + 1,
		last_error = ?, failed_at = ?, updated_at = ? WHERE id = ?`, reason, now, now, id); err != nil {
		panic(err)
	}
	if _, err := db.Exec(`INSERT INTO delivery_attempts
		(notification_id, message_id, attempt, started_at, finished_at, outcome, error)
		VALUES (?, ?, 1, ?, ?, 'dead', ?)`, id, id, now, now, reason); err != nil {
		panic(err)
	}
}
