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
)

// collDestinations holds the records of the destinations that are not up,
// one document per destination key (its _id). A destination with no
// document is up.
//
// A failing record ends one way: disabled (DisableDestination) or removed
// (DestinationUp), never both, and only one disable wins. A conditional
// update is not enough for that on FerretDB v1, which runs an update's
// filter and its write as two steps (racers with the same expected state
// can all win: see the package doc). So each ending first takes the
// record's life's one ending marker, an insert into collDestinationEnds
// whose _id is unique on every server: exactly one ending per life gets
// it. A life is a record from its insert to its removal (Life, drawn at
// insert), so that a record failing again after it was up starts anew.
const (
	collDestinations    = "destinations"
	collDestinationEnds = "destination_ends"
)

// destDoc is one destination record.
type destDoc struct {
	Key       string    `bson:"_id"`
	Channel   string    `bson:"channel"`
	State     string    `bson:"state"`
	Reason    string    `bson:"reason"`
	Since     time.Time `bson:"since"`
	UpdatedAt time.Time `bson:"updated_at"`
	// Life names this record from its insert to its removal.
	Life string `bson:"life"`
}

// endDoc is the marker of a record's life's ending (see collDestinations).
type endDoc struct {
	ID  string    `bson:"_id"` // key, a line break, life
	Key string    `bson:"key"`
	End string    `bson:"end"` // "disabled" or "up"
	At  time.Time `bson:"at"`
}

func (d destDoc) destination() notify.Destination {
	return notify.Destination{Key: d.Key, Channel: d.Channel, State: d.State, Reason: d.Reason, Since: d.Since.UTC()}
}

// failingOnly selects key's record while it is failing: every write of a
// record is conditional on its state.
func failingOnly(key string) bson.D {
	return bson.D{{Key: "_id", Value: key}, {Key: "state", Value: notify.DestinationFailing}}
}

// pendingCountBatch bounds the keys of one counting aggregation.
const pendingCountBatch = 500

// DestinationFailing records key (of channel) as failing with reason since
// at: a new record, or the one there with its earlier since kept and its
// reason updated (a write conditional on its being failing). A disabled
// record stays as it is. It returns the record as stored.
func (s *Store) DestinationFailing(ctx context.Context, channel, key, reason string, at time.Time) (notify.Destination, error) {
	coll := s.db.Collection(collDestinations)
	at = msTime(at)
	for try := 0; ; try++ {
		var d destDoc
		err := coll.FindOneAndUpdate(ctx, failingOnly(key), bson.D{
			{Key: "$set", Value: bson.D{{Key: "reason", Value: reason}, {Key: "updated_at", Value: now()}}},
			{Key: "$min", Value: bson.D{{Key: "since", Value: at}}},
		}, options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&d)
		if err == nil {
			return d.destination(), nil
		}
		if !errors.Is(err, mgo.ErrNoDocuments) {
			return notify.Destination{}, fmt.Errorf("record destination %s failing: %w", key, classify(err))
		}
		d = destDoc{Key: key, Channel: channel, State: notify.DestinationFailing, Reason: reason, Since: at, UpdatedAt: now(),
			Life: bson.NewObjectID().Hex()}
		_, err = coll.InsertOne(ctx, d)
		if err == nil {
			return d.destination(), nil
		}
		if !mgo.IsDuplicateKeyError(err) {
			return notify.Destination{}, fmt.Errorf("record destination %s failing: %w", key, classify(err))
		}
		// A record is there and is not failing (disabled), or it was
		// written or removed meanwhile: read it, and go round again
		// unless it is disabled.
		err = coll.FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Decode(&d)
		switch {
		case err == nil && d.State == notify.DestinationDisabled:
			return d.destination(), nil
		case err != nil && !errors.Is(err, mgo.ErrNoDocuments):
			return notify.Destination{}, fmt.Errorf("record destination %s failing: %w", key, classify(err))
		}
		if try > 10 {
			return notify.Destination{}, fmt.Errorf("record destination %s failing: the record kept changing", key)
		}
	}
}

// DestinationUp removes key's failing record; a disabled one stays, and no
// record is no error.
func (s *Store) DestinationUp(ctx context.Context, key string) error {
	d, ok, err := s.endLife(ctx, key, "up")
	if err != nil || !ok {
		return wrapDest("record destination %s up", key, err)
	}
	coll := s.db.Collection(collDestinations)
	if _, err := coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: key}, {Key: "life", Value: d.Life}}); err != nil {
		return fmt.Errorf("record destination %s up: %w", key, classify(err))
	}
	// The life is over: its marker is of no more use.
	if _, err := s.db.Collection(collDestinationEnds).DeleteOne(ctx, bson.D{{Key: "_id", Value: endID(key, d.Life)}}); err != nil {
		return fmt.Errorf("record destination %s up: %w", key, classify(err))
	}
	return nil
}

// DisableDestination marks key's failing record disabled with reason, and
// reports false when there was no failing record.
func (s *Store) DisableDestination(ctx context.Context, key, reason string) (bool, error) {
	d, ok, err := s.endLife(ctx, key, notify.DestinationDisabled)
	if err != nil || !ok {
		return false, wrapDest("disable destination %s", key, err)
	}
	// The marker's life may have ended meanwhile (an up that took it
	// before, and removed it with the record): then nothing matches.
	res, err := s.db.Collection(collDestinations).UpdateOne(ctx, bson.D{{Key: "_id", Value: key}, {Key: "life", Value: d.Life}},
		bson.D{{Key: "$set", Value: bson.D{
			{Key: "state", Value: notify.DestinationDisabled}, {Key: "reason", Value: reason}, {Key: "updated_at", Value: now()},
		}}})
	if err != nil {
		return false, fmt.Errorf("disable destination %s: %w", key, classify(err))
	}
	return res.MatchedCount == 1, nil
}

// endLife takes the ending marker of key's failing record's life for end,
// and returns the record; false when there is no failing record or another
// ending took the marker first.
func (s *Store) endLife(ctx context.Context, key, end string) (destDoc, bool, error) {
	var d destDoc
	err := s.db.Collection(collDestinations).FindOne(ctx, failingOnly(key)).Decode(&d)
	if errors.Is(err, mgo.ErrNoDocuments) {
		return d, false, nil
	}
	if err != nil {
		return d, false, classify(err)
	}
	_, err = s.db.Collection(collDestinationEnds).InsertOne(ctx, endDoc{ID: endID(key, d.Life), Key: key, End: end, At: now()})
	if mgo.IsDuplicateKeyError(err) {
		return d, false, nil
	}
	if err != nil {
		return d, false, classify(err)
	}
	return d, true, nil
}

func endID(key, life string) string { return key + "\n" + life }

// wrapDest wraps a non-nil err with what and key.
func wrapDest(what, key string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf(what+": %w", key, err)
}

// DisabledDestinations lists the keys of the disabled destinations, sorted.
func (s *Store) DisabledDestinations(ctx context.Context) ([]string, error) {
	ds, err := s.destinations(ctx, bson.D{{Key: "state", Value: notify.DestinationDisabled}}, 0)
	if err != nil {
		return nil, fmt.Errorf("list disabled destinations: %w", err)
	}
	keys := make([]string, 0, len(ds))
	for _, d := range ds {
		keys = append(keys, d.Key)
	}
	return keys, nil
}

// ListDestinations returns the page of destination records f selects, by
// key, each with the number of its pending notifications.
func (s *Store) ListDestinations(ctx context.Context, f notify.DestinationFilter) (notify.DestinationPage, error) {
	if f.Limit < 1 {
		return notify.DestinationPage{}, fmt.Errorf("list destinations: limit must be at least 1, got %d", f.Limit)
	}
	filter := bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: f.After}}}}
	if f.State != "" {
		filter = append(filter, bson.E{Key: "state", Value: f.State})
	}
	ds, err := s.destinations(ctx, filter, int64(f.Limit)+1)
	if err != nil {
		return notify.DestinationPage{}, fmt.Errorf("list destinations: %w", err)
	}
	out := make([]notify.Destination, len(ds))
	for i, d := range ds {
		out[i] = d.destination()
	}
	for start := 0; start < len(out); start += pendingCountBatch {
		batch := out[start:min(start+pendingCountBatch, len(out))]
		keys := make([]string, len(batch))
		for i, d := range batch {
			keys[i] = d.Key
		}
		counts, err := s.pendingByDestination(ctx, keys)
		if err != nil {
			return notify.DestinationPage{}, fmt.Errorf("list destinations: %w", err)
		}
		for i := range batch {
			batch[i].Pending = counts[batch[i].Key]
		}
	}
	return notify.CutDestinations(out, f.Limit), nil
}

// destinations reads the records filter selects, by key, at most limit
// of them (0: all).
func (s *Store) destinations(ctx context.Context, filter bson.D, limit int64) ([]destDoc, error) {
	opts := options.Find().SetSort(bson.D{{Key: "_id", Value: 1}})
	if limit > 0 {
		opts.SetLimit(limit)
	}
	return findAll[destDoc](ctx, s.db.Collection(collDestinations), filter, opts)
}

// pendingByDestination counts the pending notifications of each of keys
// in one aggregation (destination_status_idx on MongoDB).
func (s *Store) pendingByDestination(ctx context.Context, keys []string) (map[string]int64, error) {
	cur, err := s.n.Aggregate(ctx, mgo.Pipeline{
		{{Key: "$match", Value: bson.D{
			{Key: "destination", Value: bson.D{{Key: "$in", Value: keys}}},
			{Key: "status", Value: string(notify.StatusPending)},
		}}},
		{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$destination"}, {Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}}},
	})
	if err != nil {
		return nil, fmt.Errorf("count pending notifications: %w", classify(err))
	}
	var rows []struct {
		Key string `bson:"_id"`
		N   int64  `bson:"n"`
	}
	if err := cur.All(ctx, &rows); err != nil {
		return nil, fmt.Errorf("count pending notifications: %w", classify(err))
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.Key] = r.N
	}
	return out, nil
}

// EnableDestination removes key's record, disabled or failing: its
// deliveries go again. No record is notify.ErrNotFound.
func (s *Store) EnableDestination(ctx context.Context, key string) error {
	var d destDoc
	err := s.db.Collection(collDestinations).FindOneAndDelete(ctx, bson.D{{Key: "_id", Value: key}}).Decode(&d)
	if errors.Is(err, mgo.ErrNoDocuments) {
		return fmt.Errorf("enable destination %s: %w", key, notify.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("enable destination %s: %w", key, classify(err))
	}
	if _, err := s.db.Collection(collDestinationEnds).DeleteOne(ctx, bson.D{{Key: "_id", Value: endID(key, d.Life)}}); err != nil {
		return fmt.Errorf("enable destination %s: %w", key, classify(err))
	}
	return nil
}
