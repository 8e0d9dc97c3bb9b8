package mongo

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/heraldhq/herald/internal/notify"
)

// Activity counts the notifications created and delivered per minute since
// since, and those dead-lettered since then (the console's overview). Each
// count reads a range of an index of migration 1 and projects one time per
// document, counted into minutes here (FerretDB v1 has no $dateTrunc):
// created from list_idx (created_at), delivered from list_status_idx
// (status 'sent', created since the window began less
// notify.ActivityLookback), failed from failed_idx (status 'failed',
// failed_at).
func (s *Store) Activity(ctx context.Context, since time.Time) (notify.Activity, error) {
	a := notify.Activity{Created: map[time.Time]int64{}, Delivered: map[time.Time]int64{}}
	from := ceilMS(since)
	for _, q := range []struct {
		what   string
		filter bson.D
		field  string
		into   map[time.Time]int64
	}{
		{"created", bson.D{{Key: "created_at", Value: bson.D{{Key: "$gte", Value: from}}}}, "created_at", a.Created},
		{"delivered", bson.D{
			{Key: "status", Value: string(notify.StatusSent)},
			{Key: "created_at", Value: bson.D{{Key: "$gte", Value: ceilMS(since.Add(-notify.ActivityLookback))}}},
			{Key: "sent_at", Value: bson.D{{Key: "$gte", Value: from}}},
		}, "sent_at", a.Delivered},
	} {
		if err := s.perMinute(ctx, q.filter, q.field, q.into); err != nil {
			return notify.Activity{}, fmt.Errorf("activity: %s: %w", q.what, err)
		}
	}
	n, err := s.n.CountDocuments(ctx, bson.D{
		{Key: "status", Value: string(notify.StatusFailed)},
		{Key: "failed_at", Value: bson.D{{Key: "$gte", Value: from}}},
	})
	if err != nil {
		return notify.Activity{}, fmt.Errorf("activity: failed: %w", classify(err))
	}
	a.Failed = n
	return a, nil
}

// perMinute counts the documents filter selects by the minute of their
// time field.
func (s *Store) perMinute(ctx context.Context, filter bson.D, field string, into map[time.Time]int64) error {
	cur, err := s.n.Find(ctx, filter, options.Find().SetProjection(bson.D{{Key: "_id", Value: 0}, {Key: field, Value: 1}}))
	if err != nil {
		return classify(err)
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		v, err := cur.Current.LookupErr(field)
		if err != nil {
			return fmt.Errorf("a document without %s", field)
		}
		ms, ok := v.DateTimeOK()
		if !ok {
			return fmt.Errorf("%s is not a date", field)
		}
		into[time.UnixMilli(ms).UTC().Truncate(time.Minute)]++
	}
	return classify(cur.Err())
}
