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

	"github.com/heraldhq/herald/internal/testkit/mongotest"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// herald serve on MongoDB (embedded FerretDB), with the outbox table as the
// queue (no broker) and with RabbitMQ through the relay: what it accepts is
// delivered once; migrate status lists the index migrations as applied;
// with the server stopped /readyz answers 503, and after it comes back on
// its files, 200 and delivery again.
func TestServeMongoDB(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, broker string }{{"table", ""}, {"rabbitmq", "amqp"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, data, dbAddr := t.TempDir(), t.TempDir(), freeAddr(t)
			fdb, err := mongotest.StartFerret(dbAddr, data)
			require.NoError(t, err)
			t.Cleanup(func() { fdb.Stop() })
			addr := freeAddr(t)
			env := map[string]string{"HERALD_HTTP_ADDR": addr, "HERALD_DATABASE_URL": "mongodb://" + dbAddr + "/herald"}
			transport := "outbox table (no broker)"
			if tc.broker != "" {
				env["HERALD_BROKER_URL"] = testenv.Vhost(t)
				env["HERALD_RELAY_INTERVAL"] = "100ms"
				transport = "(relay + worker)"
			}
			p := startHerald(t, dir, env, "serve")
			api := client{base: "http://" + addr}
			waitHTTP(t, api.base+"/healthz")
			p.requireLog("MongoDB mongodb://", transport)
			var ids []string
			deliver := func(n int) {
				t.Helper()
				for i := range n {
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
			}
			deliver(20)

			st := startHerald(t, dir, env, "migrate", "status")
			st.waitExit(30 * time.Second)
			require.NoError(t, st.Err(), st.Log())
			require.Contains(t, st.Log(), "init")

			fdb.Stop()
			require.Eventually(t, func() bool { code, _ := get(t, api.base+"/readyz"); return code == 503 },
				30*time.Second, 50*time.Millisecond, "not ready while the database is away")
			fdb, err = mongotest.StartFerret(dbAddr, data)
			require.NoError(t, err)
			require.Eventually(t, func() bool { code, _ := get(t, api.base+"/readyz"); return code == 200 },
				60*time.Second, 50*time.Millisecond, "ready again once it is back")
			deliver(5)
		})
	}
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
