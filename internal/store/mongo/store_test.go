package mongo_test

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	mgo "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/mongo"
	"github.com/heraldhq/herald/internal/testkit/mongotest"
	"github.com/heraldhq/herald/internal/testkit/storetest"
)

var _ storetest.Store = (*mongo.Store)(nil)

// openMigrated opens a store on a database of its own, migrated.
func openMigrated(t testing.TB) (*mongo.Store, *mgo.Database) {
	t.Helper()
	return openMigratedAt(t, mongotest.URL(t))
}

// openMigratedAt opens a store on the database u names, migrated.
func openMigratedAt(t testing.TB, u string) (*mongo.Store, *mgo.Database) {
	t.Helper()
	return openMigratedConfig(t, u, mongo.Config{})
}

// openMigratedConfig is openMigratedAt with cfg.
func openMigratedConfig(t testing.TB, u string, cfg mongo.Config) (*mongo.Store, *mgo.Database) {
	t.Helper()
	s, err := mongo.Open(t.Context(), u, cfg)
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
	storetest.Run(t, func(t *testing.T) storetest.Harness { return harness(t, mongo.Config{}) })
}

// harness is the conformance suite's Harness on a database of its own, with
// a store opened with cfg.
func harness(t *testing.T, cfg mongo.Config) storetest.Harness {
	t.Helper()
	s, db := openMigratedConfig(t, mongotest.URL(t), cfg)
	return storetest.Harness{
		Store: s,
		Count: func(t testing.TB, table string) int { return count(t, db, table) },
		AddAttempt: func(t testing.TB, id int64, a notify.Attempt) {
			require.NoError(t, s.AddAttempt(t.Context(), id, a))
		},
		Backdate: func(t testing.TB, id int64, d time.Duration) {
			t.Helper()
			var n struct {
				CreatedAt time.Time `bson:"created_at"`
			}
			coll := db.Collection("notifications")
			filter := bson.D{{Key: "id", Value: id}}
			require.NoError(t, coll.FindOne(t.Context(), filter).Decode(&n))
			_, err := coll.UpdateOne(t.Context(), filter, bson.D{{Key: "$set", Value: bson.D{{Key: "created_at", Value: n.CreatedAt.Add(-d)}}}})
			require.NoError(t, err)
		},
		Attempts: func(t testing.TB, id int64) []notify.Attempt {
			as, err := s.Attempts(t.Context(), id)
			if err != nil {
				require.ErrorIs(t, err, notify.ErrNotFound)
				return nil
			}
			return as
		},
		NoStatusEvents: func(t *testing.T) storetest.Harness {
			cfg := cfg
			cfg.NoStatusEvents = true
			return harness(t, cfg)
		},
	}
}

// A settling record wakes the relays when it added a status event, and
// only then.
func TestSettleWakesOnlyForStatusEvents(t *testing.T) {
	for _, cfg := range []mongo.Config{{}, {NoStatusEvents: true}} {
		s, _ := openMigratedConfig(t, mongotest.URL(t), cfg)
		require.Equal(t, !cfg.NoStatusEvents, storetest.SettleWakes(t, s), "%+v", cfg)
	}
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

// Racing creates with one idempotency key, each from its own store (as
// from separate API processes): one creates, the others replay it (the
// unique index idem_scope_uq decides), one document is stored; a
// racer with another request under the key gets notify.ErrConflict.
func TestIdempotencyKeyRace(t *testing.T) {
	t.Parallel()
	u := mongotest.URL(t)
	_, db := openMigratedAt(t, u)
	req := notify.CreateRequest{UserID: "u", Channel: notify.ChannelEmail, To: "a@example.com", Subject: "s", Body: "b"}
	other := req
	other.Body = "different"
	const racers = 8
	results := make([]notify.Created, racers)
	errs := make([]error, racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range racers {
		s, err := mongo.Open(t.Context(), u, mongo.Config{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r := req
			if i == racers-1 {
				r = other
			}
			results[i], errs[i] = s.Create(t.Context(), notify.NewNotification{Request: r, IdempotencyKey: "k-race"})
		}()
	}
	close(start)
	wg.Wait()
	created, replayed, conflicts := 0, 0, 0
	var id int64
	for i := range racers {
		switch {
		case errors.Is(errs[i], notify.ErrConflict):
			conflicts++
			continue
		case errs[i] != nil:
			t.Fatalf("racer %d: %v", i, errs[i])
		case results[i].Replayed:
			replayed++
		default:
			created++
		}
		if id == 0 {
			id = results[i].Notification.ID
		}
		require.Equal(t, id, results[i].Notification.ID, "every answer names the one notification")
	}
	n, err := db.Collection("notifications").CountDocuments(t.Context(), bson.D{})
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "one document")
	if conflicts == 1 {
		require.Equal(t, 1, created)
		require.Equal(t, racers-2, replayed)
	} else {
		// The other request won the key: every racer with the first
		// request is told conflict.
		require.Equal(t, racers-1, conflicts)
		require.Equal(t, 1, created)
	}
}
