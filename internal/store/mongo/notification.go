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

// Create inserts the notification document with its notification.requested
// event inside it: one insert, so both exist or neither. A duplicate
// idempotency key (the unique index idempotency_key) answers from the
// stored notification; a duplicate _id (another process took the id) tries
// the next one. See api.Notifications.
func (s *Store) Create(ctx context.Context, nn notify.NewNotification) (notify.Created, error) {
	c, err := s.create(ctx, nn)
	if err != nil {
		return notify.Created{}, fmt.Errorf("create notification: %w", err)
	}
	if !c.Replayed {
		s.hub.Wake()
	}
	return c, nil
}

func (s *Store) create(ctx context.Context, nn notify.NewNotification) (notify.Created, error) {
	return s.createScoped(ctx, nn, "")
}

// createScoped is create, for a document unique under scope (its
// idem_scope, "" for none) when scope is given: a document that holds it
// already is answered (Replayed) and nothing is written.
func (s *Store) createScoped(ctx context.Context, nn notify.NewNotification, scope string) (notify.Created, error) {
	// Times are kept to the millisecond: the answer says what a read will.
	nn.Request.SendAt, nn.Request.ExpiresAt = msPtr(nn.Request.SendAt), msPtr(nn.Request.ExpiresAt)
	for try := 0; ; try++ {
		if scope != "" {
			if c, ok, err := s.scopedHop(ctx, scope); err != nil || ok {
				return c, err
			}
		}
		if nn.RecipientRevision != 0 {
			if err := s.checkRevision(ctx, nn.Request.UserID, nn.RecipientRevision); err != nil {
				return notify.Created{}, err
			}
		}
		if nn.IdempotencyKey != "" {
			if c, ok, err := s.replay(ctx, nn); err != nil || ok {
				return c, err
			}
		}
		suppressed, err := s.optedOut(ctx, nn)
		if err != nil {
			return notify.Created{}, err
		}
		id, err := s.allocID(ctx)
		if err != nil {
			return notify.Created{}, err
		}
		d, n, err := newDoc(nn, id, now(), suppressed, s.statusEvents)
		if err != nil {
			return notify.Created{}, err
		}
		if scope != "" {
			d.IdemScope = scope
		}
		if nn.Fault == notify.FaultAfterOutboxInsert {
			// The document is built with its event and not written: the
			// single insert is all or nothing.
			return notify.Created{}, notify.ErrInjectedFault
		}
		_, err = s.n.InsertOne(ctx, d)
		if err == nil {
			return notify.Created{Notification: n}, nil
		}
		if !mgo.IsDuplicateKeyError(err) {
			return notify.Created{}, fmt.Errorf("insert notification: %w", classify(err))
		}
		// The id or the key was taken meanwhile: the loop reads the key
		// again, and a taken id moves the guess on.
		s.nextID.CompareAndSwap(id+1, 0)
		if try > 100 {
			return notify.Created{}, fmt.Errorf("insert notification: %d ids taken in a row", try)
		}
	}
}

// newDoc builds the document a create inserts: the notification nn makes
// under id at t, with its notification.requested event inside; or, when
// suppressed, the notification suppressed with its notification.suppressed
// status event inside (when statusEvents) and no notification.requested
// event.
func newDoc(nn notify.NewNotification, id int64, t time.Time, suppressed, statusEvents bool) (doc, notify.Notification, error) {
	// Times are kept to the millisecond: the answer says what a read will.
	nn.Request.SendAt, nn.Request.ExpiresAt = msPtr(nn.Request.SendAt), msPtr(nn.Request.ExpiresAt)
	r := nn.Request
	n := nn.Pending(id, t)
	d := doc{
		Key: key(id), ID: id, Rev: 1, UserID: r.UserID, Channel: r.Channel, To: r.To, Subject: r.Subject, Body: r.Body,
		Status: string(notify.StatusPending), IdempotencyKey: nn.IdempotencyKey, CreatedAt: t, UpdatedAt: t,
		Destination: nn.Destination, SendAt: r.SendAt, ExpiresAt: r.ExpiresAt,
		HTML: r.HTML, Template: r.Template, TemplateVersion: r.TemplateVersion, Locale: r.Locale, Digest: nn.Digest,
		Category: r.Category, Unsubscribe: r.Unsubscribe, FallbackOf: nn.FallbackOf,
	}
	fallback, err := notify.EncodeHops(nn.Fallback)
	if err != nil {
		return doc{}, notify.Notification{}, err
	}
	d.Fallback = fallback
	if p := r.Priority.OrDefault(); p != notify.PriorityNormal {
		d.Priority = string(p)
	}
	if nn.IdempotencyKey != "" {
		d.IdemScope = idemScope(r.UserID, nn.IdempotencyKey)
	}
	if suppressed {
		n = nn.Suppressed(id, t)
		d.Status = string(notify.StatusSuppressed)
		// A suppressed hop hands on to the next at once (makeHops).
		d.FallbackDue = nn.FallbackOf != 0 && len(nn.Fallback) > 0
		if statusEvents {
			if err := d.addStatusEvent(t); err != nil {
				return doc{}, notify.Notification{}, err
			}
		}
		d.derive()
		return d, n, nil
	}
	if err := d.addEvent(n, t, nn.Traceparent); err != nil {
		return doc{}, notify.Notification{}, err
	}
	// The event is due at send_at (one in the past: now), so that
	// neither the relay nor the table claim takes it before.
	if r.SendAt != nil && r.SendAt.After(t) {
		d.Events[len(d.Events)-1].AvailableAt = *r.SendAt
	}
	d.derive()
	return d, n, nil
}

// replay answers a create whose idempotency key the user holds within
// notify.IdempotencyWindow. A key held by an older notification is taken
// from it (its idem_scope cleared, a revision like any change), and the
// create goes on to insert.
func (s *Store) replay(ctx context.Context, nn notify.NewNotification) (notify.Created, bool, error) {
	scope := idemScope(nn.Request.UserID, nn.IdempotencyKey)
	var d doc
	err := s.n.FindOne(ctx, bson.D{{Key: "idem_scope", Value: scope}},
		options.FindOne().SetProjection(noHeavy)).Decode(&d)
	if errors.Is(err, mgo.ErrNoDocuments) {
		return notify.Created{}, false, nil
	}
	if err != nil {
		return notify.Created{}, false, fmt.Errorf("read notification with the same idempotency key: %w", classify(err))
	}
	if now().Before(d.CreatedAt.Add(notify.IdempotencyWindow)) {
		c, err := nn.Replay(d.notification())
		return c, true, err
	}
	_, _, err = s.change(ctx, d.ID, func(x *doc) error {
		if x.IdemScope != scope {
			return errNoChange
		}
		x.IdemScope = ""
		return nil
	})
	if err != nil {
		return notify.Created{}, false, fmt.Errorf("expire idempotency key of notification %d: %w", d.ID, err)
	}
	return notify.Created{}, false, nil
}

// idemScope is a user's idempotency key as the unique index holds it. A
// key is printable ASCII (the API's check), so the line break cannot be
// part of it and the pair is unambiguous.
func idemScope(userID, key string) string { return key + "\n" + userID }

// noHeavy leaves out the arrays a notification's fields do not need.
var noHeavy = bson.D{{Key: "events", Value: 0}, {Key: "processed", Value: 0}, {Key: "history", Value: 0}}

// allocID returns the id to try for a new notification: one past the last
// this process used, or past the largest stored after a clash.
func (s *Store) allocID(ctx context.Context) (int64, error) {
	for {
		cur := s.nextID.Load()
		if cur == 0 {
			var d struct {
				ID int64 `bson:"id"`
			}
			err := s.n.FindOne(ctx, bson.D{}, options.FindOne().SetSort(bson.D{{Key: "_id", Value: -1}}).
				SetProjection(idOnly)).Decode(&d)
			if err != nil && !errors.Is(err, mgo.ErrNoDocuments) {
				return 0, fmt.Errorf("read the largest notification id: %w", classify(err))
			}
			s.nextID.CompareAndSwap(0, d.ID+1)
			continue
		}
		if cur >= maxNotificationID {
			return 0, errors.New("notification ids exhausted")
		}
		if s.nextID.CompareAndSwap(cur, cur+1) {
			return cur, nil
		}
	}
}

// Get returns one notification, or an error wrapping notify.ErrNotFound.
func (s *Store) Get(ctx context.Context, id int64) (notify.Notification, error) {
	var d doc
	err := s.n.FindOne(ctx, bson.D{{Key: "_id", Value: key(id)}}, options.FindOne().SetProjection(noHeavy)).Decode(&d)
	if errors.Is(err, mgo.ErrNoDocuments) {
		return notify.Notification{}, fmt.Errorf("get notification %d: %w", id, notify.ErrNotFound)
	}
	if err != nil {
		return notify.Notification{}, fmt.Errorf("get notification %d: %w", id, classify(err))
	}
	n := d.notification()
	if n.Status == notify.StatusPending {
		if n.Waiting, err = s.waiting(ctx, d.Destination, d.Channel); err != nil {
			return notify.Notification{}, fmt.Errorf("get notification %d: %w", id, err)
		}
	}
	return n, nil
}

// waiting returns the record of the destination key, or else of the
// channel's one provider, that a pending notification waits on; nil when
// neither has one.
func (s *Store) waiting(ctx context.Context, key, channel string) (*notify.Waiting, error) {
	ds, err := s.destinations(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{key, channel}}}}}, 0)
	if err != nil {
		return nil, fmt.Errorf("read its destination: %w", err)
	}
	var w *notify.Waiting
	for _, d := range ds {
		if w == nil || d.Key == key {
			w = &notify.Waiting{Destination: d.Key, State: d.State, Reason: d.Reason, Since: d.Since.UTC()}
		}
	}
	return w, nil
}

// Attempts returns every delivery attempt of a notification in the order
// they were made, or notify.ErrNotFound.
func (s *Store) Attempts(ctx context.Context, id int64) ([]notify.Attempt, error) {
	var d doc
	err := s.n.FindOne(ctx, bson.D{{Key: "_id", Value: key(id)}},
		options.FindOne().SetProjection(bson.D{{Key: "history", Value: 1}})).Decode(&d)
	if errors.Is(err, mgo.ErrNoDocuments) {
		return nil, fmt.Errorf("attempts of notification %d: %w", id, notify.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("attempts of notification %d: %w", id, classify(err))
	}
	out := make([]notify.Attempt, 0, len(d.History))
	for _, a := range d.History {
		at := notify.Attempt{ID: a.ID, Attempt: a.Attempt, MessageID: a.MessageID, StartedAt: a.StartedAt.UTC(),
			FinishedAt: utcp(a.FinishedAt), Outcome: a.Outcome, Error: a.Error, Deferral: a.Deferral}
		if a.Repeats > 0 {
			at.Repeats, at.LastAt = a.Repeats, utcp(a.LastAt)
		}
		out = append(out, at)
	}
	return out, nil
}

// AttemptPage returns the page of a notification's attempts f selects, or
// notify.ErrNotFound. The history is embedded in the notification's
// document and read whole: one entry per outage, not per probe.
func (s *Store) AttemptPage(ctx context.Context, id int64, f notify.AttemptFilter) (notify.AttemptPage, error) {
	if f.Limit < 1 {
		return notify.AttemptPage{}, fmt.Errorf("attempts of notification %d: limit must be at least 1, got %d", id, f.Limit)
	}
	as, err := s.Attempts(ctx, id)
	if err != nil {
		return notify.AttemptPage{}, err
	}
	return notify.PageAttempts(as, f), nil
}

// AddAttempt appends an attempt to a notification's history as a claim
// would, for tests of the history.
func (s *Store) AddAttempt(ctx context.Context, id int64, a notify.Attempt) error {
	found, _, err := s.change(ctx, id, func(d *doc) error {
		d.NextAttempt++
		d.History = append(d.History, attDoc{ID: d.ID*attemptSpan + d.NextAttempt, Attempt: a.Attempt,
			MessageID: a.MessageID, StartedAt: msTime(a.StartedAt), FinishedAt: msPtr(a.FinishedAt),
			Outcome: a.Outcome, Error: a.Error})
		return nil
	})
	if err == nil && !found {
		err = notify.ErrNotFound
	}
	return err
}

func msPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := msTime(*t)
	return &u
}
