// Package mongo is herald's MongoDB store: a notification is one document
// that carries everything a delivery changes (its outbox events, its claim,
// the message ids it has processed, its attempts), so that every guarantee
// holds with single-document atomicity alone, without multi-document
// transactions (which need a replica set, and which FerretDB does not have).
//
// Every state change of a notification is one conditional write of its
// document: read it at revision r, compute the next state in Go, write it as
// revision r+1 only if it is still at r. MongoDB applies such a
// compare-and-set atomically. FerretDB v1 does not: it runs the filter and
// the write of an update as two steps, and racers with the same expected
// state can all win (seen: 4 of 16 concurrent findOneAndUpdate calls). So
// the store first claims the revision itself by inserting "ID@r+1" into the
// revisions collection, whose _id is unique on every server: exactly one
// writer gets each revision, and only that writer replaces the document.
// The revision document holds the state it writes, so a writer that died
// between the two steps is rolled forward by the next one (after
// rollForwardAfter).
//
// Ids: a notification's id is allocated by inserting its document (a
// duplicate _id retries with the next id); its events and attempts take ids
// derived from it (see eventID, attemptID), so that no counter document is
// needed (a counter's $inc is not atomic on FerretDB either).
package mongo

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	mgo "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/wake"
)

// Config tunes a Store.
type Config struct {
	// ConnectTimeout bounds each attempt to reach the server (the driver's
	// server selection). Default 5s.
	ConnectTimeout time.Duration
	// StartTimeout is how long Open waits for an unreachable server,
	// retrying with backoff (100ms doubling to 5s), before it fails.
	// Default 1m; negative: do not wait (Open only checks the URL).
	StartTimeout time.Duration
	// NoStatusEvents, when true, makes a record that settles a
	// notification write no status event (notification.sent or
	// notification.failed) and wake no relay for one: for a deployment
	// where nobody receives them. Default false: written.
	NoStatusEvents bool
}

func (c Config) withDefaults() Config {
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 5 * time.Second
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = time.Minute
	}
	return c
}

func (c Config) validate() error {
	if c.ConnectTimeout < time.Millisecond {
		return fmt.Errorf("mongodb connect timeout must be at least 1ms, got %s", c.ConnectTimeout)
	}
	return nil
}

// The collections.
const (
	collNotifications = "notifications"
	collRevisions     = "revisions"
	collOrphans       = "orphan_messages"
	collMigrations    = "schema_migrations"
	collRecipients    = "recipients"
	collTemplates     = "template_versions"
	collPreferences   = "preferences"
)

// Store is a herald store on one MongoDB database. It is safe for
// concurrent use.
type Store struct {
	client *mgo.Client
	db     *mgo.Database
	n      *mgo.Collection
	revs   *mgo.Collection
	orph   *mgo.Collection
	hub    wake.Hub
	// cands and dueCands hold the candidates of the last search of each
	// order (see candidateCache): the relay's and the table claim's.
	cands    candidateCache
	dueCands [notify.RankCount]candidateCache
	// nextID is this process's guess of the next free notification id;
	// a duplicate _id moves it past the largest id stored.
	nextID atomic.Int64
	// statusEvents is !Config.NoStatusEvents: whether a settling record
	// adds its status event.
	statusEvents bool
}

// DatabaseName returns the database a mongodb:// URL names, or an error
// when it names none.
func DatabaseName(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", errors.New("HERALD_DATABASE_URL is not a valid mongodb URL")
	}
	if u.Scheme != "mongodb" && u.Scheme != "mongodb+srv" {
		return "", fmt.Errorf("mongodb URL must start with mongodb:// or mongodb+srv://, got scheme %q", u.Scheme)
	}
	name := strings.TrimPrefix(u.Path, "/")
	if name == "" || strings.ContainsAny(name, "/\\. \"$") {
		return "", fmt.Errorf("mongodb URL names no database (want mongodb://host/DATABASE), got path %q", u.Path)
	}
	return name, nil
}

// Open connects to the database rawURL names, waiting for an unreachable
// server up to cfg.StartTimeout with backoff. Later, the driver reconnects
// by itself; meanwhile Ping (readiness) and every call fail with
// notify.ErrUnavailable. Unless the URL says otherwise, writes use write
// concern majority and retryable writes. It does not create the indexes:
// call Migrate.
func Open(ctx context.Context, rawURL string, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	name, err := DatabaseName(rawURL)
	if err != nil {
		return nil, err
	}
	opts := options.Client().ApplyURI(rawURL)
	if opts.WriteConcern == nil {
		opts.SetWriteConcern(writeconcern.Majority())
	}
	if opts.RetryWrites == nil {
		opts.SetRetryWrites(true)
	}
	opts.SetServerSelectionTimeout(cfg.ConnectTimeout)
	opts.SetConnectTimeout(cfg.ConnectTimeout)
	client, err := mgo.Connect(opts)
	if err != nil {
		return nil, fmt.Errorf("open mongodb: %w", err)
	}
	db := client.Database(name)
	if cfg.StartTimeout > 0 {
		if err := waitServer(ctx, db, cfg.StartTimeout); err != nil {
			_ = client.Disconnect(context.Background())
			return nil, fmt.Errorf("open mongodb database %s: %w", name, err)
		}
	}
	return &Store{
		client:       client,
		db:           db,
		n:            db.Collection(collNotifications),
		revs:         db.Collection(collRevisions),
		orph:         db.Collection(collOrphans),
		statusEvents: !cfg.NoStatusEvents,
	}, nil
}

// waitServer pings until the server answers, with backoff, for at most
// limit.
func waitServer(ctx context.Context, db *mgo.Database, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	delay := 100 * time.Millisecond
	for {
		err := db.RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Err()
		if err == nil {
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: server unreachable for %s: %w", notify.ErrUnavailable, limit, err)
		case <-t.C:
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// Close disconnects.
func (s *Store) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.client.Disconnect(ctx)
}

// Ping checks that the server answers. A failure wraps
// notify.ErrUnavailable.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Err(); err != nil {
		return fmt.Errorf("ping mongodb: %w: %w", notify.ErrUnavailable, err)
	}
	return nil
}

// Subscribe returns a channel that receives a value after every Create,
// Redrive or Reconcile in this process that wrote events. Other processes'
// writes are not seen: their readers poll.
func (s *Store) Subscribe(ctx context.Context) <-chan struct{} { return s.hub.Subscribe(ctx) }

// classify marks errors that mean the server cannot be used right now with
// notify.ErrUnavailable.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if mgo.IsNetworkError(err) || mgo.IsTimeout(err) || errors.Is(err, mgo.ErrClientDisconnected) ||
		strings.Contains(err.Error(), "server selection") {
		return fmt.Errorf("%w: %w", notify.ErrUnavailable, err)
	}
	return err
}

// now is the store's clock at BSON's millisecond precision, so that a value
// returned from a write equals the value read back.
func now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

func msTime(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

// Drop removes the whole database (for scratch databases: herald bench).
func (s *Store) Drop(ctx context.Context) error {
	if err := s.db.Drop(ctx); err != nil {
		return fmt.Errorf("drop mongodb database: %w", classify(err))
	}
	return nil
}
