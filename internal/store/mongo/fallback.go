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

// hopScope is the idempotency scope (idem_scope, unique) of the hop made
// for notification id: a second try at the same hop meets the first's
// document. No API key can hold it: a key is printable ASCII, and the
// scope starts with a line break.
func hopScope(id int64) string { return "\nfallback\n" + key(id) }

// makeHops makes the fallback hop of notification id when it is a dead
// letter with one due (fallback_due, set in the write that dead-lettered
// it), as the SQL stores do in that write's transaction (see the
// PostgreSQL store's fallBack). Without transactions it takes three
// steps, each safe to repeat: the hop's insert, unique by its scope
// (hopScope), the link (fallback_next, fallback_due cleared), and, when
// the hop was suppressed, the same for the hop. A process that stops
// between them leaves fallback_due set, and the reconciler's pass
// (resumeFallbacks) finishes.
func (s *Store) makeHops(ctx context.Context, id int64) error {
	for id != 0 {
		d, found, err := s.load(ctx, id)
		if err != nil {
			return fmt.Errorf("fallback of notification %d: %w", id, err)
		}
		if !found || !d.FallbackDue {
			return nil
		}
		nn, ok := d.notification().NextHop()
		hop := notify.Notification{}
		if ok {
			c, err := s.createScoped(ctx, nn, hopScope(id))
			if err != nil {
				return fmt.Errorf("fallback hop of notification %d: %w", id, err)
			}
			hop = c.Notification
		}
		_, _, err = s.change(ctx, id, func(x *doc) error {
			if !x.FallbackDue {
				return errNoChange
			}
			x.FallbackDue, x.FallbackNext = false, hop.ID
			return nil
		})
		if err != nil {
			return fmt.Errorf("link fallback hop of notification %d: %w", id, err)
		}
		if hop.ID != 0 {
			s.hub.Wake()
		}
		id = 0
		if hop.Status == notify.StatusSuppressed {
			id = hop.ID
		}
	}
	return nil
}

// resumeFallbacks makes the hops that a stopped process left due, for up
// to limit dead letters whose last change is before cut (those younger
// are still being made by their worker).
func (s *Store) resumeFallbacks(ctx context.Context, cut time.Time, limit int) error {
	cur, err := s.n.Find(ctx, bson.D{
		{Key: "fallback_due", Value: true},
		{Key: "updated_at", Value: bson.D{{Key: "$lt", Value: cut}}},
	}, options.Find().SetProjection(idOnly).SetLimit(int64(limit)))
	if err != nil {
		return fmt.Errorf("find due fallbacks: %w", classify(err))
	}
	var ids []struct {
		ID int64 `bson:"id"`
	}
	if err := cur.All(ctx, &ids); err != nil {
		return fmt.Errorf("find due fallbacks: %w", classify(err))
	}
	for _, x := range ids {
		if err := s.makeHops(ctx, x.ID); err != nil {
			return err
		}
	}
	return nil
}

// scopedHop answers a create under scope when a document holds it
// already: the hop made by an earlier try.
func (s *Store) scopedHop(ctx context.Context, scope string) (notify.Created, bool, error) {
	var d doc
	err := s.n.FindOne(ctx, bson.D{{Key: "idem_scope", Value: scope}}, options.FindOne().SetProjection(noHeavy)).Decode(&d)
	if errors.Is(err, mgo.ErrNoDocuments) {
		return notify.Created{}, false, nil
	}
	if err != nil {
		return notify.Created{}, false, fmt.Errorf("read fallback hop: %w", classify(err))
	}
	return notify.Created{Notification: d.notification(), Replayed: true}, true, nil
}
