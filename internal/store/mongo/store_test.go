package mongo_test

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	mgo "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store"
	"github.com/heraldhq/herald/internal/store/mongo"
	"github.com/heraldhq/herald/internal/store/mongo/mongotest"
	"github.com/heraldhq/herald/internal/store/storetest"
)

var _ store.Store = (*mongo.Store)(nil)

// openMigrated opens a store on a database of its own, migrated.
func openMigrated(t testing.TB) (*mongo.Store, *mgo.Database) {
	t.Helper()
	u := mongotest.URL(t)
	s, err := mongo.Open(t.Context(), u, mongo.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.NoError(t, s.Migrate(t.Context()))
	name, err := mongo.DatabaseName(u)
	require.NoError(t, err)
	c, err := mgo.Connect(options.Client().ApplyURI(u))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Disconnect(t.Context()) })
	return s, c.Database(name)
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		s, db := openMigrated(t)
		return storetest.Harness{
			Store: s,
			Count: func(t testing.TB, table string) int { return count(t, db, table) },
			AddAttempt: func(t testing.TB, id int64, a notify.Attempt) {
				require.NoError(t, s.AddAttempt(t.Context(), id, a))
			},
			Attempts: func(t testing.TB, id int64) []notify.Attempt {
				as, err := s.Attempts(t.Context(), id)
				if err != nil {
					require.ErrorIs(t, err, notify.ErrNotFound)
					return nil
				}
				return as
			},
		}
	})
}

// count counts what a SQL table would hold: notifications, the events of
// every notification (outbox), and the processed or leased message ids of
// every notification plus the orphan ones (processed_messages).
func count(t testing.TB, db *mgo.Database, table string) int {
	t.Helper()
	ctx := t.Context()
	switch table {
	case "notifications":
		n, err := db.Collection("notifications").CountDocuments(ctx, bson.D{})
		require.NoError(t, err)
		return int(n)
	case "outbox", "processed_messages":
		field := "events"
		if table == "processed_messages" {
			field = "processed"
		}
		cur, err := db.Collection("notifications").Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: field, Value: 1}}))
		require.NoError(t, err)
		var ds []bson.M
		require.NoError(t, cur.All(ctx, &ds))
		total := 0
		for _, d := range ds {
			if a, ok := d[field].(bson.A); ok {
				total += len(a)
			}
		}
		if table == "processed_messages" {
			n, err := db.Collection("orphan_messages").CountDocuments(ctx, bson.D{})
			require.NoError(t, err)
			total += int(n)
		}
		return total
	}
	t.Fatalf("count: unknown table %q", table)
	return 0
}

// A URL without a database name is refused with a clear error before any
// connection is tried.
func TestOpenRejects(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"mongodb://127.0.0.1:1", "mongodb://127.0.0.1:1/", "mongodb://h/a.b", "postgres://h/db", "mongodb://%zz/db"} {
		s, err := mongo.Open(t.Context(), u, mongo.Config{})
		require.Error(t, err, u)
		require.Nil(t, s, u)
	}
	_, err := mongo.Open(t.Context(), "mongodb://127.0.0.1:1/", mongo.Config{})
	require.ErrorContains(t, err, "names no database")
}

// An unreachable server: Open waits with backoff up to StartTimeout and
// then fails as unavailable; a store opened without waiting answers Ping
// (readiness) with notify.ErrUnavailable.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	u := "mongodb://" + addr + "/herald"
	start := time.Now()
	_, err = mongo.Open(t.Context(), u, mongo.Config{ConnectTimeout: 200 * time.Millisecond, StartTimeout: 700 * time.Millisecond})
	require.ErrorIs(t, err, notify.ErrUnavailable)
	require.GreaterOrEqual(t, time.Since(start), 700*time.Millisecond, "it waited")
	s, err := mongo.Open(t.Context(), u, mongo.Config{ConnectTimeout: 200 * time.Millisecond, StartTimeout: -1})
	require.NoError(t, err)
	defer s.Close()
	require.ErrorIs(t, s.Ping(t.Context()), notify.ErrUnavailable)
}
