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

// recipientDoc is one recipient, keyed by user id.
type recipientDoc struct {
	UserID string `bson:"_id"`
	// Addresses is a sub-document keyed by channel name.
	Addresses map[string]string `bson:"addresses"`
	Locale    string            `bson:"locale"`
	TimeZone  string            `bson:"time_zone"`
	Revision  int64             `bson:"revision"`
	UpdatedAt time.Time         `bson:"updated_at"`
}

func (d recipientDoc) recipient() notify.Recipient {
	return notify.Recipient{UserID: d.UserID, Addresses: notify.CompactAddresses(d.Addresses),
		Locale: d.Locale, TimeZone: d.TimeZone, Revision: d.Revision, UpdatedAt: d.UpdatedAt.UTC()}
}

// templateDoc is one template version, keyed by name and version.
type templateDoc struct {
	Key       string    `bson:"_id"`
	Name      string    `bson:"name"`
	Version   int       `bson:"version"`
	Channel   string    `bson:"channel"`
	Locale    string    `bson:"locale"`
	Subject   string    `bson:"subject"`
	Text      string    `bson:"text_part"`
	HTML      string    `bson:"html_part"`
	CreatedAt time.Time `bson:"created_at"`
}

func (d templateDoc) version() notify.TemplateVersion {
	return notify.TemplateVersion{Name: d.Name, Version: d.Version, Channel: d.Channel, Locale: d.Locale,
		Subject: d.Subject, Text: d.Text, HTML: d.HTML, CreatedAt: d.CreatedAt.UTC()}
}

// checkRevision is a create's recipient guard (see
// notify.NewNotification.RecipientRevision). Without transactions it is a
// read just before the insert: a change that lands between the two is not
// seen (the one guarantee this engine gives less than the SQL ones).
func (s *Store) checkRevision(ctx context.Context, userID string, rev int64) error {
	var d recipientDoc
	err := s.db.Collection(collRecipients).FindOne(ctx, bson.D{{Key: "_id", Value: userID}}).Decode(&d)
	if errors.Is(err, mgo.ErrNoDocuments) || (err == nil && d.Revision != rev) {
		return notify.ErrRecipientChanged
	}
	if err != nil {
		return fmt.Errorf("read recipient revision: %w", classify(err))
	}
	return nil
}

// PutRecipient creates or replaces the recipient r.UserID and returns it
// with its revision and update time.
func (s *Store) PutRecipient(ctx context.Context, r notify.Recipient) (notify.Recipient, error) {
	t := now()
	addrs := notify.CompactAddresses(r.Addresses)
	if addrs == nil {
		addrs = map[string]string{} // an empty sub-document, not null
	}
	var d recipientDoc
	err := s.db.Collection(collRecipients).FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: r.UserID}},
		bson.D{
			{Key: "$set", Value: bson.D{{Key: "addresses", Value: addrs}, {Key: "locale", Value: r.Locale}, {Key: "time_zone", Value: r.TimeZone},
				{Key: "updated_at", Value: t}}},
			{Key: "$inc", Value: bson.D{{Key: "revision", Value: int64(1)}}},
		},
		options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)).Decode(&d)
	if err != nil {
		return notify.Recipient{}, fmt.Errorf("put recipient: %w", classify(err))
	}
	return d.recipient(), nil
}

// Recipient returns the recipient userID, or notify.ErrNotFound.
func (s *Store) Recipient(ctx context.Context, userID string) (notify.Recipient, error) {
	var d recipientDoc
	err := s.db.Collection(collRecipients).FindOne(ctx, bson.D{{Key: "_id", Value: userID}}).Decode(&d)
	if errors.Is(err, mgo.ErrNoDocuments) {
		return notify.Recipient{}, fmt.Errorf("get recipient: %w", notify.ErrNotFound)
	}
	if err != nil {
		return notify.Recipient{}, fmt.Errorf("get recipient: %w", classify(err))
	}
	return d.recipient(), nil
}

// DeleteRecipient deletes the recipient userID, or answers
// notify.ErrNotFound. Its notifications are kept as they are:
// EraseRecipient anonymises them.
func (s *Store) DeleteRecipient(ctx context.Context, userID string) error {
	res, err := s.db.Collection(collRecipients).DeleteOne(ctx, bson.D{{Key: "_id", Value: userID}})
	if err != nil {
		return fmt.Errorf("delete recipient: %w", classify(err))
	}
	if res.DeletedCount == 0 {
		return fmt.Errorf("delete recipient: %w", notify.ErrNotFound)
	}
	return nil
}

// EraseRecipient erases a user's personal data as the SQL stores do (see
// the PostgreSQL store's EraseRecipient): the recipient document goes,
// and each notification document of the user is anonymised in one write
// (its address, subject, body, HTML part and last error emptied, its
// attempts' errors cleared, its events' payloads erased). Without
// transactions the documents are written one by one: an erasure that
// fails part way is completed by running it again.
func (s *Store) EraseRecipient(ctx context.Context, userID string) (notify.Erasure, error) {
	var out notify.Erasure
	res, err := s.db.Collection(collRecipients).DeleteOne(ctx, bson.D{{Key: "_id", Value: userID}})
	if err != nil {
		return out, fmt.Errorf("erase recipient: %w", classify(err))
	}
	out.Recipient = res.DeletedCount > 0
	cur, err := s.n.Find(ctx, bson.D{{Key: "user_id", Value: userID}}, options.Find().SetProjection(idOnly))
	if err != nil {
		return out, fmt.Errorf("erase recipient: find notifications: %w", classify(err))
	}
	var ids []struct {
		ID int64 `bson:"id"`
	}
	if err := cur.All(ctx, &ids); err != nil {
		return out, fmt.Errorf("erase recipient: find notifications: %w", classify(err))
	}
	for _, x := range ids {
		var events, attempts int64
		_, _, err := s.change(ctx, x.ID, func(d *doc) error {
			events, attempts = 0, 0
			d.To, d.Subject, d.Body, d.HTML, d.LastError = "", "", "", "", ""
			d.Unsubscribe, d.Fallback, d.FallbackDue = "", "", false
			for i := range d.History {
				if d.History[i].Error != "" {
					d.History[i].Error = ""
					attempts++
				}
			}
			for i := range d.Events {
				p, _ := notify.ErasePayload([]byte(d.Events[i].Payload))
				d.Events[i].Payload = string(p)
				d.Events[i].LastError = ""
				events++
			}
			return nil
		})
		if err != nil {
			return out, fmt.Errorf("erase recipient: notification %d: %w", x.ID, err)
		}
		out.Notifications++
		out.Events += events
		out.Attempts += attempts
	}
	return out, nil
}

// templateKey is a version's _id: unique per name and version, so that
// two puts that chose the same number meet at the insert.
func templateKey(name string, version int) string { return fmt.Sprintf("%s\n%010d", name, version) }

// PutTemplate stores v as the next version of its template and returns it
// with its version number and creation time.
func (s *Store) PutTemplate(ctx context.Context, v notify.TemplateVersion) (notify.TemplateVersion, error) {
	c := s.db.Collection(collTemplates)
	for try := 0; ; try++ {
		var last templateDoc
		err := c.FindOne(ctx, bson.D{{Key: "name", Value: v.Name}}, options.FindOne().SetSort(bson.D{{Key: "version", Value: -1}})).Decode(&last)
		if err != nil && !errors.Is(err, mgo.ErrNoDocuments) {
			return notify.TemplateVersion{}, fmt.Errorf("put template: %w", classify(err))
		}
		v.Version = last.Version + 1
		v.CreatedAt = now()
		_, err = c.InsertOne(ctx, templateDoc{Key: templateKey(v.Name, v.Version), Name: v.Name, Version: v.Version, Channel: v.Channel,
			Locale: v.Locale, Subject: v.Subject, Text: v.Text, HTML: v.HTML, CreatedAt: v.CreatedAt})
		if mgo.IsDuplicateKeyError(err) && try < 10 {
			continue // another put of the name took the number
		}
		if err != nil {
			return notify.TemplateVersion{}, fmt.Errorf("put template: %w", classify(err))
		}
		return v, nil
	}
}

// Template returns the template name as of version (0: its newest), or
// notify.ErrNotFound.
func (s *Store) Template(ctx context.Context, name string, version int) (notify.Template, error) {
	ts, err := s.templates(ctx, bson.D{{Key: "name", Value: name}}, version)
	if err != nil {
		return notify.Template{}, fmt.Errorf("get template: %w", err)
	}
	if len(ts) == 0 {
		return notify.Template{}, fmt.Errorf("get template %q: %w", name, notify.ErrNotFound)
	}
	return ts[0], nil
}

// Templates returns every template as of its newest version, by name.
func (s *Store) Templates(ctx context.Context) ([]notify.Template, error) {
	ts, err := s.templates(ctx, bson.D{}, 0)
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	return ts, nil
}

// templates reads the versions filter selects and folds them into
// templates as of version (0: the newest): per name, channel and locale,
// the newest version at or below it.
func (s *Store) templates(ctx context.Context, filter bson.D, version int) ([]notify.Template, error) {
	cur, err := s.db.Collection(collTemplates).Find(ctx, filter,
		options.Find().SetSort(bson.D{{Key: "name", Value: 1}, {Key: "version", Value: -1}}))
	if err != nil {
		return nil, classify(err)
	}
	var docs []templateDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, classify(err)
	}
	var out []notify.Template
	seen := map[[3]string]bool{}
	for _, d := range docs {
		if len(out) == 0 || out[len(out)-1].Name != d.Name {
			out = append(out, notify.Template{Name: d.Name, Latest: d.Version})
		}
		k := [3]string{d.Name, d.Channel, d.Locale}
		if (version != 0 && d.Version > version) || seen[k] {
			continue
		}
		seen[k] = true
		t := &out[len(out)-1]
		t.Variants = append(t.Variants, d.version())
	}
	for i := range out {
		sortVariants(out[i].Variants)
	}
	return out, nil
}

// sortVariants orders variants by channel, then locale, as the SQL
// stores return them.
func sortVariants(vs []notify.TemplateVersion) {
	for i := 1; i < len(vs); i++ {
		for j := i; j > 0 && (vs[j].Channel < vs[j-1].Channel || (vs[j].Channel == vs[j-1].Channel && vs[j].Locale < vs[j-1].Locale)); j-- {
			vs[j], vs[j-1] = vs[j-1], vs[j]
		}
	}
}
