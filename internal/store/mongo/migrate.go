package mongo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	mgo "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/heraldhq/herald/internal/notify"

	"github.com/heraldhq/herald/internal/store/migrate"
)

// A migration is a set of index definitions, versioned like the SQL
// stores' files and recorded in schema_migrations ({_id: version, name,
// applied_at}). Creating an index that exists with the same definition
// changes nothing, so a migration interrupted before its record is simply
// applied again.
type migration struct {
	version int
	name    string
	indexes map[string][]mgo.IndexModel // by collection
	// drop names indexes to drop (by collection) before indexes are
	// created; one already gone is no error.
	drop map[string][]string
	// backfill, when set, runs after the indexes are created and must be
	// safe to run again.
	backfill func(ctx context.Context, db *mgo.Database) error
}

var migrations = []migration{
	{version: 1, name: "init", indexes: map[string][]mgo.IndexModel{
		collNotifications: {
			// One notification per idempotency key, under racing creates.
			// Sparse: notifications without a key are not in it (FerretDB
			// v1 has no partial indexes).
			{Keys: bson.D{{Key: "idempotency_key", Value: 1}},
				Options: options.Index().SetName("idempotency_key_uq").SetUnique(true).SetSparse(true)},
			// The relay's and the table transport's due events.
			{Keys: bson.D{{Key: "due", Value: 1}}, Options: options.Index().SetName("due_idx").SetSparse(true)},
			// outbox stats.
			{Keys: bson.D{{Key: "open", Value: 1}}, Options: options.Index().SetName("open_idx")},
			// Dead letters, newest failure first.
			{Keys: bson.D{{Key: "status", Value: 1}, {Key: "failed_at", Value: -1}, {Key: "_id", Value: -1}},
				Options: options.Index().SetName("failed_idx")},
			// Retention.
			{Keys: bson.D{{Key: "settled", Value: 1}}, Options: options.Index().SetName("settled_idx").SetSparse(true)},
			// The reconciler.
			{Keys: bson.D{{Key: "status", Value: 1}, {Key: "open", Value: 1}, {Key: "updated_at", Value: 1}},
				Options: options.Index().SetName("stale_idx")},
			// Listings: all, by user, by status; newest first.
			{Keys: bson.D{{Key: "created_at", Value: -1}, {Key: "_id", Value: -1}}, Options: options.Index().SetName("list_idx")},
			{Keys: bson.D{{Key: "user_id", Value: 1}, {Key: "created_at", Value: -1}, {Key: "_id", Value: -1}},
				Options: options.Index().SetName("list_user_idx")},
			{Keys: bson.D{{Key: "status", Value: 1}, {Key: "created_at", Value: -1}, {Key: "_id", Value: -1}},
				Options: options.Index().SetName("list_status_idx")},
		},
		collRevisions: {
			{Keys: bson.D{{Key: "at", Value: 1}}, Options: options.Index().SetName("at_idx")},
		},
		collOrphans: {
			{Keys: bson.D{{Key: "processed_at", Value: 1}}, Options: options.Index().SetName("processed_at_idx")},
		},
	}},
	// The listing's channel filter (GET /notifications?channel=webhook):
	// a page of a rare channel reads its own entries, not the other
	// channels'. With a user or a status, that filter's index serves.
	{version: 2, name: "channel_list_idx", indexes: map[string][]mgo.IndexModel{
		collNotifications: {
			{Keys: bson.D{{Key: "channel", Value: 1}, {Key: "created_at", Value: -1}, {Key: "_id", Value: -1}},
				Options: options.Index().SetName("list_channel_idx")},
		},
	}},
	// Idempotency keys scoped to the user and expiring (issue 21): the
	// global unique index goes; idem_scope (key and user) is unique, and
	// the existing keyed notifications get theirs.
	{version: 3, name: "idempotency_scope", drop: map[string][]string{collNotifications: {"idempotency_key_uq"}},
		indexes: map[string][]mgo.IndexModel{
			collNotifications: {
				{Keys: bson.D{{Key: "idem_scope", Value: 1}},
					Options: options.Index().SetName("idem_scope_uq").SetUnique(true).SetSparse(true)},
			},
		},
		backfill: backfillIdemScope,
	},
	// The reconciler's second kind of candidate: a pending notification
	// whose only open events are status events (left from a settling
	// before a redrive). Sparse: the field is absent when zero.
	{version: 4, name: "open_status_idx", indexes: map[string][]mgo.IndexModel{
		collNotifications: {
			{Keys: bson.D{{Key: "open_status", Value: 1}},
				Options: options.Index().SetName("open_status_idx").SetSparse(true)},
		},
	}},
	// Issue 32: the table claim takes documents in due order, (due, _id),
	// and reads none that is not due; the relay's search (due up to now,
	// in _id order) is served by the same index's leading key, so due_idx
	// goes. Sparse: a document with no open event has no due.
	{version: 5, name: "due_order_idx", drop: map[string][]string{collNotifications: {"due_idx"}},
		indexes: map[string][]mgo.IndexModel{
			collNotifications: {
				{Keys: bson.D{{Key: "due", Value: 1}, {Key: "_id", Value: 1}},
					Options: options.Index().SetName("due_order_idx").SetSparse(true)},
			},
		}},
	// Issue 32: the destinations listing counts each destination's
	// pending notifications by (destination, status). The destinations
	// collection (the records of destinations that are not up, keyed by
	// _id) needs no index of its own. Pending email and telegram
	// notifications get their destination (the channel's name); pending
	// webhooks created before this version keep none and are not counted.
	{version: 6, name: "destinations", indexes: map[string][]mgo.IndexModel{
		collNotifications: {
			{Keys: bson.D{{Key: "destination", Value: 1}, {Key: "status", Value: 1}},
				Options: options.Index().SetName("destination_status_idx")},
		},
	}, backfill: backfillDestinations},
	// Issue 38: every long-running process reports itself in the
	// processes collection (keyed by its id) every few seconds; the
	// writers delete the documents of processes gone for a while by
	// seen_at.
	{version: 7, name: "processes", indexes: map[string][]mgo.IndexModel{
		collProcesses: {
			{Keys: bson.D{{Key: "seen_at", Value: 1}}, Options: options.Index().SetName("seen_at_idx")},
		},
	}},
	// Issue 34, point 5: the claims take the documents with something
	// due rank by rank (high, normal, bulk), each rank in due order, from
	// (rank, due, _id); rank is derived while a document has an open
	// event, so the index stays as sparse as due_order_idx, which goes.
	// The documents open before this version get rank 1 (normal).
	{version: 8, name: "due_rank_idx", drop: map[string][]string{collNotifications: {"due_order_idx"}},
		indexes: map[string][]mgo.IndexModel{
			collNotifications: {
				{Keys: bson.D{{Key: "rank", Value: 1}, {Key: "due", Value: 1}, {Key: "_id", Value: 1}},
					Options: options.Index().SetName("due_rank_idx").SetSparse(true)},
			},
		}, backfill: backfillRank},
	// Issue 35: recipients (keyed by user id) and template versions
	// (keyed by name and version); a create's look-up reads a name's
	// versions newest first.
	{version: 9, name: "recipients_templates", indexes: map[string][]mgo.IndexModel{
		collTemplates: {
			{Keys: bson.D{{Key: "name", Value: 1}, {Key: "version", Value: -1}}, Options: options.Index().SetName("name_version_idx")},
		},
	}},
	// Issue 35, point 3: preferences, one document per user, category
	// and channel (its _id); a user's are read together.
	{version: 10, name: "preferences", indexes: map[string][]mgo.IndexModel{
		collPreferences: {
			{Keys: bson.D{{Key: "user_id", Value: 1}}, Options: options.Index().SetName("user_idx")},
		},
	}},
	// Issue 35, point 5: a dead letter whose fallback hop is still to be
	// made (fallback_due, set in the dead-lettering write), which the
	// reconciler's pass makes when the worker that wrote it stopped
	// before it did. Sparse: the field is absent but for those few.
	{version: 11, name: "fallback_due_idx", indexes: map[string][]mgo.IndexModel{
		collNotifications: {
			{Keys: bson.D{{Key: "fallback_due", Value: 1}},
				Options: options.Index().SetName("fallback_due_idx").SetSparse(true)},
		},
	}},
	// Issue 37: a recipient's addresses are one sub-document keyed by
	// channel name, so that a new channel needs no field; the three
	// fields of the recipients written before move into it.
	{version: 12, name: "recipient_addresses", backfill: backfillAddresses},
}

// oldAddressFields are the recipient fields of the documents written
// before version 12, with the channel whose address each held.
var oldAddressFields = []struct{ field, channel string }{
	{"email", "email"}, {"telegram_chat_id", "telegram"}, {"webhook_url", "webhook"},
}

// backfillAddresses moves the old address fields of every recipient that
// has one into its addresses (an empty one leaves no key; a channel the
// document already has an address for keeps it) and unsets them, with the
// document's revision in the filter and left alone, like
// backfillIdemScope: run by herald migrate before the processes of this
// version start, nothing else writes the fields. A document it moved has
// no old field left, so running it again finds nothing to do.
func backfillAddresses(ctx context.Context, db *mgo.Database) error {
	coll := db.Collection(collRecipients)
	var anyOld bson.A
	unset := bson.D{}
	for _, o := range oldAddressFields {
		anyOld = append(anyOld, bson.D{{Key: o.field, Value: bson.D{{Key: "$exists", Value: true}}}})
		unset = append(unset, bson.E{Key: o.field, Value: ""})
	}
	type recipient struct {
		UserID    string            `bson:"_id"`
		Revision  int64             `bson:"revision"`
		Addresses map[string]string `bson:"addresses"`
	}
	return eachDoc(ctx, coll, bson.D{{Key: "$or", Value: anyOld}}, func(d recipient, raw bson.Raw) error {
		addrs := notify.CompactAddresses(d.Addresses)
		if addrs == nil {
			addrs = map[string]string{}
		}
		for _, o := range oldAddressFields {
			v, ok := raw.Lookup(o.field).StringValueOK()
			if _, has := addrs[o.channel]; ok && v != "" && !has {
				addrs[o.channel] = v
			}
		}
		_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: d.UserID}, {Key: "revision", Value: d.Revision}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "addresses", Value: addrs}}}, {Key: "$unset", Value: unset}})
		return classify(err)
	})
}

// backfillRank gives every document with an open event (due set) and no
// rank the normal rank. Like backfillIdemScope it leaves the revision
// alone: run by herald migrate before the processes of this version
// start, nothing else writes the field.
func backfillRank(ctx context.Context, db *mgo.Database) error {
	_, err := db.Collection(collNotifications).UpdateMany(ctx,
		bson.D{{Key: "due", Value: bson.D{{Key: "$exists", Value: true}}}, {Key: "rank", Value: bson.D{{Key: "$exists", Value: false}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "rank", Value: notify.RankNormal}}}})
	return classify(err)
}

// backfillDestinations gives every pending notification of a channel with
// one provider (email, telegram) and no destination its key, the
// channel's name. Like backfillIdemScope it leaves the revision alone: run
// by herald migrate before the processes of this version start, nothing
// else writes the field.
func backfillDestinations(ctx context.Context, db *mgo.Database) error {
	coll := db.Collection(collNotifications)
	for _, ch := range []string{"email", "telegram"} {
		_, err := coll.UpdateMany(ctx, bson.D{{Key: "status", Value: "pending"}, {Key: "channel", Value: ch},
			{Key: "destination", Value: bson.D{{Key: "$exists", Value: false}}}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "destination", Value: ch}}}})
		if err != nil {
			return classify(err)
		}
	}
	return nil
}

// backfillIdemScope gives every notification with an idempotency key and
// no idem_scope its scope. It writes with the document's revision in the
// filter and leaves the revision alone: run by herald migrate before the
// processes of this version start, nothing else writes the field.
func backfillIdemScope(ctx context.Context, db *mgo.Database) error {
	coll := db.Collection(collNotifications)
	type keyed struct {
		Key    string `bson:"_id"`
		Rev    int64  `bson:"rev"`
		UserID string `bson:"user_id"`
		IdKey  string `bson:"idempotency_key"`
	}
	filter := bson.D{{Key: "idempotency_key", Value: bson.D{{Key: "$exists", Value: true}}},
		{Key: "idem_scope", Value: bson.D{{Key: "$exists", Value: false}}}}
	return eachDoc(ctx, coll, filter, func(d keyed, _ bson.Raw) error {
		_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: d.Key}, {Key: "rev", Value: d.Rev}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "idem_scope", Value: idemScope(d.UserID, d.IdKey)}}}})
		return classify(err)
	}, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "rev", Value: 1}, {Key: "user_id", Value: 1}, {Key: "idempotency_key", Value: 1}}))
}

// eachDoc passes each document of coll that filter selects (with opts) to
// fn, decoded into a T and as it is, and stops at fn's first error: a
// backfill's walk over the documents it rewrites, one at a time. A
// decoding error is returned as it is, the driver's classified.
func eachDoc[T any](ctx context.Context, coll *mgo.Collection, filter any, fn func(d T, raw bson.Raw) error, opts ...options.Lister[options.FindOptions]) error {
	cur, err := coll.Find(ctx, filter, opts...)
	if err != nil {
		return classify(err)
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		var d T
		if err := cur.Decode(&d); err != nil {
			return err
		}
		if err := fn(d, cur.Current); err != nil {
			return err
		}
	}
	return classify(cur.Err())
}

// Migrations lists the migrations this binary ships, as migrate.Migration
// (SQL holds a description of the indexes).
func Migrations() []migrate.Migration {
	out := make([]migrate.Migration, len(migrations))
	for i, m := range migrations {
		desc := ""
		for coll, ims := range m.indexes {
			for _, im := range ims {
				desc += fmt.Sprintf("%s: %v\n", coll, im.Keys)
			}
		}
		out[i] = migrate.Migration{Version: m.version, Name: m.name, SQL: desc}
	}
	return out
}

type migrationRecord struct {
	Version   int       `bson:"_id"`
	Name      string    `bson:"name"`
	AppliedAt time.Time `bson:"applied_at"`
}

// Migrate creates the indexes of every migration not yet recorded, in
// version order, and records each. Running it again changes nothing; two
// runs at once both create the same indexes (a no-op for the second) and
// one record per version wins (its _id is the version).
func (s *Store) Migrate(ctx context.Context) error { return s.migrate(ctx, migrations) }

// migrate applies ms as Migrate does; a test brings a database to an
// earlier version with a prefix of migrations.
func (s *Store) migrate(ctx context.Context, ms []migration) error {
	coll := s.db.Collection(collMigrations)
	for _, m := range ms {
		n, err := coll.CountDocuments(ctx, bson.D{{Key: "_id", Value: m.version}})
		if err != nil {
			return fmt.Errorf("migrate: read schema_migrations: %w", classify(err))
		}
		if n > 0 {
			continue
		}
		for name, idxs := range m.drop {
			for _, idx := range idxs {
				if err := s.db.Collection(name).Indexes().DropOne(ctx, idx); err != nil && !indexNotFound(err) {
					return fmt.Errorf("migrate %04d_%s: drop index %s of %s: %w", m.version, m.name, idx, name, classify(err))
				}
			}
		}
		for name, ims := range m.indexes {
			if _, err := s.db.Collection(name).Indexes().CreateMany(ctx, ims); err != nil {
				return fmt.Errorf("migrate %04d_%s: indexes of %s: %w", m.version, m.name, name, classify(err))
			}
		}
		if m.backfill != nil {
			if err := m.backfill(ctx, s.db); err != nil {
				return fmt.Errorf("migrate %04d_%s: backfill: %w", m.version, m.name, err)
			}
		}
		_, err = coll.InsertOne(ctx, migrationRecord{Version: m.version, Name: m.name, AppliedAt: now()})
		if err != nil && !mgo.IsDuplicateKeyError(err) {
			return fmt.Errorf("migrate %04d_%s: record: %w", m.version, m.name, classify(err))
		}
	}
	return nil
}

// indexNotFound reports whether err says the index to drop does not exist
// (MongoDB's IndexNotFound, code 27; FerretDB answers the same).
func indexNotFound(err error) bool {
	var se mgo.ServerError
	if errors.As(err, &se) {
		return se.HasErrorCode(27) || se.HasErrorMessage("index not found")
	}
	return false
}

// MigrationStatus reports each migration as applied or pending. It changes
// nothing.
func (s *Store) MigrationStatus(ctx context.Context) ([]migrate.State, error) {
	cur, err := s.db.Collection(collMigrations).Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", classify(err))
	}
	var recs []migrationRecord
	if err := cur.All(ctx, &recs); err != nil && !errors.Is(err, mgo.ErrNoDocuments) {
		return nil, fmt.Errorf("read schema_migrations: %w", classify(err))
	}
	records := make([]migrate.Record, len(recs))
	for i, r := range recs {
		records[i] = migrate.Record{Version: r.Version, Name: r.Name, AppliedAt: r.AppliedAt.UTC()}
	}
	return migrate.Status(Migrations(), records), nil
}
