//go:build long

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	mgo "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/heraldhq/herald/internal/testkit/mongotest"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// herald serve on MongoDB (embedded FerretDB) with the outbox table as the
// queue: a burst of creates, kill -9 of herald and a restart of FerretDB in
// the middle of it; every notification that got a 201 is delivered, a
// repeat only from the send-to-record window of the sends in flight.
func TestLongServeMongoDBKilledAndServerRestarted(t *testing.T) {
	t.Parallel()
	dir, data := t.TempDir(), t.TempDir()
	dbAddr := freeAddr(t)
	// FerretDB's PostgreSQL handler: its SQLite handler reads a whole
	// collection for every lookup, too slow for a burst of hundreds.
	pg := testenv.PostgresURL(t)
	fdb, err := mongotest.StartFerretOn(dbAddr, data, pg)
	require.NoError(t, err)
	t.Cleanup(func() { fdb.Stop() })
	addr := freeAddr(t)
	const prefetch = 10
	env := map[string]string{"HERALD_HTTP_ADDR": addr, "HERALD_DATABASE_URL": "mongodb://" + dbAddr + "/herald",
		"HERALD_SMTP_TIMEOUT": "2s", "HERALD_PREFETCH": fmt.Sprint(prefetch)}
	p := startHerald(t, dir, env, "serve")
	api := client{base: "http://" + addr}
	waitHTTP(t, api.base+"/healthz")
	p.requireLog("outbox table (no broker)")

	var mu sync.Mutex
	var accepted []string
	var stop atomic.Bool
	var wg sync.WaitGroup
	for c := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				r, err := tryCreate(api, fmt.Sprintf("c%d-%d@example.com", c, i))
				if err != nil || r.Status != 201 {
					continue
				}
				mu.Lock()
				accepted = append(accepted, r.ID)
				mu.Unlock()
			}
		}()
	}
	n := func() int { mu.Lock(); defer mu.Unlock(); return len(accepted) }
	require.Eventually(t, func() bool { return n() >= 100 }, 60*time.Second, 5*time.Millisecond)
	// The database goes away under the running herald, and comes back.
	fdb.Stop()
	fdb, err = mongotest.StartFerretOn(dbAddr, data, pg)
	require.NoError(t, err)
	before := n()
	require.Eventually(t, func() bool { return n() >= before+100 }, 60*time.Second, 5*time.Millisecond)
	p.Kill()
	stop.Store(true)
	wg.Wait()

	startHerald(t, dir, env, "serve")
	waitHTTP(t, api.base+"/healthz")
	ok := assert.Eventually(t, func() bool { return notSent(t, fdb.URI) == 0 }, 180*time.Second, 100*time.Millisecond,
		"every stored notification is delivered after the restart")
	if !ok {
		dumpPending(t, fdb.URI)
		t.FailNow()
	}

	b, err := os.ReadFile(filepath.Join(dir, "herald.mbox"))
	require.NoError(t, err)
	seen := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^Message-ID: <(\d+)@localhost>`).FindAllStringSubmatch(string(b), -1) {
		seen[m[1]]++
	}
	dups := 0
	for _, id := range accepted {
		require.NotZero(t, seen[id], "notification %s got a 201 and was never delivered", id)
	}
	for _, c := range seen {
		dups += c - 1
	}
	t.Logf("accepted=%d delivered=%d duplicates=%d", len(accepted), len(seen), dups)
	require.LessOrEqual(t, dups, 2*prefetch, "a kill and a server restart can each repeat at most the sends in flight")
}

// dumpPending logs the notification documents not sent, for a failure.
func dumpPending(t *testing.T, uri string) {
	c, err := mgo.Connect(options.Client().ApplyURI(uri))
	require.NoError(t, err)
	defer c.Disconnect(t.Context())
	cur, err := c.Database("herald").Collection("notifications").Find(t.Context(), bson.D{{Key: "status", Value: bson.D{{Key: "$ne", Value: "sent"}}}})
	require.NoError(t, err)
	var ds []bson.M
	require.NoError(t, cur.All(t.Context(), &ds))
	for _, d := range ds {
		t.Logf("not sent: %v", d)
	}
	t.Logf("%d not sent; now %s", len(ds), time.Now().UTC())
}
