package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	mgo "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/heraldhq/herald/internal/store/mongo/mongotest"
)

// herald serve on MongoDB (embedded FerretDB), the outbox table as the
// queue (no broker): what it accepts is delivered once, and migrate status
// lists the index migrations as applied.
func TestServeMongoDB(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fdb, err := mongotest.StartFerret("", "")
	require.NoError(t, err)
	t.Cleanup(func() { fdb.Stop() })
	addr := freeAddr(t)
	dbURL := strings.TrimSuffix(fdb.URI, "/") + "/herald"
	env := map[string]string{"HERALD_HTTP_ADDR": addr, "HERALD_DATABASE_URL": dbURL}
	p := startHerald(t, dir, env, "serve")
	api := client{base: "http://" + addr}
	waitHTTP(t, api.base+"/healthz")
	for _, want := range []string{"MongoDB mongodb://", "outbox table (no broker)"} {
		require.Contains(t, p.Log(), want)
	}
	var ids []string
	for i := range 20 {
		r := api.create(t, fmt.Sprintf("m%d@example.com", i), nil)
		require.Equal(t, 201, r.Status, r.Body)
		ids = append(ids, r.ID)
	}
	require.Eventually(t, func() bool { return notSent(t, fdb.URI) == 0 }, 60*time.Second, 50*time.Millisecond)
	b, err := os.ReadFile(filepath.Join(dir, "herald.mbox"))
	require.NoError(t, err)
	for _, id := range ids {
		require.Equal(t, 1, strings.Count(string(b), "Message-ID: <"+id+"@localhost>"), "notification %s", id)
	}
	st := startHerald(t, dir, env, "migrate", "status")
	st.waitExit(30 * time.Second)
	require.NoError(t, st.Err(), st.Log())
	require.Contains(t, st.Log(), "init")
}

// A mongodb URL without a database name: herald migrate says so and
// exits non-zero.
func TestMigrateMongoDBWithoutDatabase(t *testing.T) {
	t.Parallel()
	p := startHerald(t, t.TempDir(), map[string]string{"HERALD_DATABASE_URL": "mongodb://127.0.0.1:1"}, "migrate")
	p.waitExit(10 * time.Second)
	require.Error(t, p.Err())
	require.Contains(t, p.Log(), "names no database")
}

// notSent counts the notifications not sent, in one query.
func notSent(t *testing.T, uri string) int64 {
	c, err := mgo.Connect(options.Client().ApplyURI(uri))
	require.NoError(t, err)
	defer c.Disconnect(t.Context())
	n, err := c.Database("herald").Collection("notifications").CountDocuments(t.Context(),
		bson.D{{Key: "status", Value: bson.D{{Key: "$ne", Value: "sent"}}}})
	require.NoError(t, err)
	return n
}
