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

// preferenceDoc is one preference: a user's choice for a category on a
// channel, keyed by the three (prefKey).
type preferenceDoc struct {
	Key       string    `bson:"_id"`
	UserID    string    `bson:"user_id"`
	Category  string    `bson:"category"`
	Channel   string    `bson:"channel"`
	Allowed   bool      `bson:"allowed"`
	UpdatedAt time.Time `bson:"updated_at"`
}

// prefKey is a preference's _id. A category and a channel hold no NUL
// (their names are checked), so the key is unambiguous.
func prefKey(userID, category, channel string) string {
	return category + "\x00" + channel + "\x00" + userID
}

// optedOut reads, for a create that asks (CheckPreference), whether its
// user opted out of its category on its channel. MongoDB as tested here
// has no transactions: the read is the create's last before its single
// insert, and a preference written between the two applies from the next
// create.
func (s *Store) optedOut(ctx context.Context, nn notify.NewNotification) (bool, error) {
	if !nn.CheckPreference {
		return false, nil
	}
	r := nn.Request
	var d preferenceDoc
	err := s.db.Collection(collPreferences).FindOne(ctx, bson.D{{Key: "_id", Value: prefKey(r.UserID, r.Category, r.Channel)}}).Decode(&d)
	if errors.Is(err, mgo.ErrNoDocuments) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read preference: %w", classify(err))
	}
	return !d.Allowed, nil
}

// Preferences returns the preferences of userID; none is an empty set,
// not an error.
func (s *Store) Preferences(ctx context.Context, userID string) (notify.Preferences, error) {
	docs, err := findAll[preferenceDoc](ctx, s.db.Collection(collPreferences), bson.D{{Key: "user_id", Value: userID}})
	if err != nil {
		return nil, fmt.Errorf("get preferences: %w", err)
	}
	p := notify.Preferences{}
	for _, d := range docs {
		if p[d.Category] == nil {
			p[d.Category] = map[string]bool{}
		}
		p[d.Category][d.Channel] = d.Allowed
	}
	return p, nil
}

// PutPreferences replaces every preference of userID with p: the listed
// ones are written, then the others deleted. Without transactions a
// reader may see the new ones beside old ones for a moment; an opt-out
// given in p is in force once PutPreferences returns.
func (s *Store) PutPreferences(ctx context.Context, userID string, p notify.Preferences) error {
	keep := bson.A{}
	for cat, chs := range p {
		for ch, allowed := range chs {
			if err := s.SetPreference(ctx, userID, cat, ch, allowed); err != nil {
				return fmt.Errorf("put preferences: %w", err)
			}
			keep = append(keep, prefKey(userID, cat, ch))
		}
	}
	_, err := s.db.Collection(collPreferences).DeleteMany(ctx, bson.D{{Key: "user_id", Value: userID},
		{Key: "_id", Value: bson.D{{Key: "$nin", Value: keep}}}})
	if err != nil {
		return fmt.Errorf("put preferences: %w", classify(err))
	}
	return nil
}

// SetPreference records one preference of userID (a preference link's
// opt-out), leaving the others as they are.
func (s *Store) SetPreference(ctx context.Context, userID, category, channel string, allowed bool) error {
	_, err := s.db.Collection(collPreferences).ReplaceOne(ctx, bson.D{{Key: "_id", Value: prefKey(userID, category, channel)}},
		preferenceDoc{Key: prefKey(userID, category, channel), UserID: userID, Category: category, Channel: channel, Allowed: allowed, UpdatedAt: now()},
		options.Replace().SetUpsert(true))
	if err != nil {
		return fmt.Errorf("set preference: %w", classify(err))
	}
	return nil
}
