//go:build bulkbench

package api_test

// The "Bulk" figure: notifications accepted through POST
// /notifications/batch over real HTTP (an in-process server on loopback),
// against single creates and the raw insert ceiling (the store's own
// multi-row statement, no HTTP). Not a test of timings: it logs figures.
//
//	HERALD_BULK_N=1000000 go test -tags bulkbench -run TestBulkFigures -v -timeout 60m ./internal/api/

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/postgres"
	"github.com/heraldhq/herald/internal/store/sqlite"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

func bulkN(t *testing.T, name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		return n
	}
	return def
}

func bulkItem(i int, keyed bool) map[string]any {
	m := map[string]any{"user_id": "u-" + strconv.Itoa(i), "channel": "email", "to": "user" + strconv.Itoa(i) + "@example.com", "subject": "News", "body": "Hello, this is the newsletter."}
	if keyed {
		m["idempotency_key"] = "news-" + strconv.Itoa(i)
	}
	return m
}

// run sends n items from c clients at once, each request of size items
// (size 0: single creates), and returns the seconds it took.
func bulkRun(t *testing.T, url string, n, c, size int, keyed bool) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	start := time.Now()
	for range c {
		wg.Go(func() {
			for {
				per := max(size, 1)
				first := int(next.Add(int64(per))) - per
				if first >= n {
					return
				}
				k := min(per, n-first)
				var body []byte
				target := url + "/notifications"
				want := http.StatusCreated
				if size == 0 {
					body, _ = json.Marshal(bulkItem(first, false))
				} else {
					items := make([]any, k)
					for j := range items {
						items[j] = bulkItem(first+j, keyed)
					}
					body, _ = json.Marshal(map[string]any{"notifications": items})
					target += "/batch"
					want = http.StatusMultiStatus
				}
				resp, err := http.Post(target, "application/json", bytes.NewReader(body))
				if err != nil {
					failed.Store(err.Error())
					return
				}
				raw, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != want || (size > 0 && bytes.Count(raw, []byte(`"status":201`)) != k) {
					failed.Store(fmt.Sprintf("%d %.200s", resp.StatusCode, raw))
					return
				}
			}
		})
	}
	wg.Wait()
	require.Nil(t, failed.Load())
	return time.Since(start)
}

func rate(n int, d time.Duration) string {
	return fmt.Sprintf("%d in %.1fs = %.0f/s", n, d.Seconds(), float64(n)/d.Seconds())
}

func TestBulkFigures(t *testing.T) {
	n := bulkN(t, "HERALD_BULK_N", 100000)
	single := bulkN(t, "HERALD_BULK_SINGLE", 20000)
	keyed := bulkN(t, "HERALD_BULK_KEYED", 20000)
	ctx := context.Background()

	t.Run("postgres", func(t *testing.T) {
		pgURL := testenv.PostgresURL(t)
		st, err := postgres.Open(ctx, pgURL, postgres.Config{})
		require.NoError(t, err)
		defer st.Close()
		require.NoError(t, st.Migrate(ctx))
		a, err := api.New(st, api.Config{})
		require.NoError(t, err)
		srv := httptest.NewServer(a.Handler())
		defer srv.Close()

		d := bulkRun(t, srv.URL, n, 4, notify.MaxBatch, false)
		t.Logf("postgres batch endpoint (1,000 per request, 4 clients, no keys): %s", rate(n, d))
		dk := bulkRun(t, srv.URL, keyed, 4, notify.MaxBatch, true)
		t.Logf("postgres batch endpoint (1,000 per request, 4 clients, a key per item): %s", rate(keyed, dk))
		ds := bulkRun(t, srv.URL, single, 32, 0, false)
		t.Logf("postgres single creates (32 clients): %s", rate(single, ds))

		pool, err := pgxpool.New(ctx, pgURL)
		require.NoError(t, err)
		defer pool.Close()
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range 4 {
			wg.Go(func() {
				for {
					first := int(next.Add(notify.MaxBatch)) - notify.MaxBatch
					if first >= n {
						return
					}
					k := min(notify.MaxBatch, n-first)
					nns := make([]notify.NewNotification, k)
					for j := range nns {
						nns[j] = notify.NewNotification{Request: notify.CreateRequest{UserID: "u-" + strconv.Itoa(first+j), Channel: "email",
							To: "user" + strconv.Itoa(first+j) + "@example.com", Subject: "News", Body: "Hello, this is the newsletter."}}
					}
					_, err := postgres.CreateGroup(ctx, pool, nns)
					require.NoError(t, err)
				}
			})
		}
		wg.Wait()
		dr := time.Since(start)
		t.Logf("postgres raw ceiling (the store's multi-row statement, 1,000 rows each, 4 connections, no HTTP): %s", rate(n, dr))
		t.Logf("postgres batch endpoint / raw ceiling: %.2f", dr.Seconds()/d.Seconds())
		var rows int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM outbox").Scan(&rows))
		require.Equal(t, 2*n+single+keyed, rows)
	})

	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "herald.db")
		st, err := sqlite.Open(ctx, path, sqlite.Config{})
		require.NoError(t, err)
		defer st.Close()
		require.NoError(t, st.Migrate(ctx))
		a, err := api.New(st, api.Config{})
		require.NoError(t, err)
		srv := httptest.NewServer(a.Handler())
		defer srv.Close()
		d := bulkRun(t, srv.URL, n, 4, notify.MaxBatch, false)
		t.Logf("sqlite batch endpoint (1,000 per request, 4 clients, no keys): %s", rate(n, d))
		ds := bulkRun(t, srv.URL, single, 32, 0, false)
		t.Logf("sqlite single creates (32 clients): %s", rate(single, ds))
		start := time.Now()
		for first := 0; first < n; first += notify.MaxBatch {
			nns := make([]notify.NewNotification, min(notify.MaxBatch, n-first))
			for j := range nns {
				nns[j] = notify.NewNotification{Request: notify.CreateRequest{UserID: "u-" + strconv.Itoa(first+j), Channel: "email",
					To: "user" + strconv.Itoa(first+j) + "@example.com", Subject: "News", Body: "Hello, this is the newsletter."}}
			}
			_, err := st.CreateBatch(ctx, nns)
			require.NoError(t, err)
		}
		dr := time.Since(start)
		t.Logf("sqlite raw ceiling (the store's CreateBatch, 1,000 each, no HTTP): %s", rate(n, dr))
		t.Logf("sqlite batch endpoint / raw ceiling: %.2f", dr.Seconds()/d.Seconds())
	})
}
