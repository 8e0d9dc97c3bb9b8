package mongo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	mgo "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/heraldhq/herald/internal/notify"
)

// doc is one notification document: the notification, its outbox events,
// its claim, the message ids it has processed and its attempts.
type doc struct {
	// Key is the id as 19 decimal digits: FerretDB v1 serves a filter on
	// a string _id from its primary key, and one on a number by reading
	// every document; the digits sort as the numbers do.
	Key            string `bson:"_id"`
	ID             int64  `bson:"id"`
	Rev            int64  `bson:"rev"`
	UserID         string `bson:"user_id"`
	Channel        string `bson:"channel"`
	To             string `bson:"recipient"`
	Subject        string `bson:"subject"`
	Body           string `bson:"body"`
	Status         string `bson:"status"`
	Attempts       int    `bson:"attempts"`
	LastError      string `bson:"last_error,omitempty"`
	IdempotencyKey string `bson:"idempotency_key,omitempty"`
	// IdemScope is the idempotency key as it is unique: scoped to the
	// user (idemScope), unique under idem_scope_uq, and cleared once a
	// create after the key's window takes it over.
	IdemScope  string     `bson:"idem_scope,omitempty"`
	CreatedAt  time.Time  `bson:"created_at"`
	UpdatedAt  time.Time  `bson:"updated_at"`
	SentAt     *time.Time `bson:"sent_at,omitempty"`
	FailedAt   *time.Time `bson:"failed_at,omitempty"`
	RetryDueAt *time.Time `bson:"retry_due_at,omitempty"`
	Claim      *claimDoc  `bson:"claim,omitempty"`
	Events     []eventDoc `bson:"events"`
	Processed  []procDoc  `bson:"processed"`
	History    []attDoc   `bson:"history"`

	// Derived on every write (see derive), for the indexes.
	// Due is when the earliest unprocessed event can be taken (its
	// available time or the end of its lease); absent when none is open.
	Due *time.Time `bson:"due,omitempty"`
	// Open counts the unprocessed events; Oldest is the oldest one's time.
	Open int `bson:"open"`
	// OpenStatus counts the unprocessed status events (notification.sent,
	// notification.failed) among them, absent when none: the reconciler
	// counts only the others (index open_status_idx, sparse).
	OpenStatus int        `bson:"open_status,omitempty"`
	Oldest     *time.Time `bson:"oldest,omitempty"`
	// Settled is the earliest processed_at of an event or a processed
	// message: where retention has something to look at.
	Settled *time.Time `bson:"settled,omitempty"`
	// NextEvent and NextAttempt number the events and attempts (ids are
	// derived from them, see eventID and attemptID).
	NextEvent   int64 `bson:"next_event"`
	NextAttempt int64 `bson:"next_attempt"`

	// Destination is the destination key the notification goes to
	// (notify.NewNotification.Destination), absent when none: the
	// destinations listing counts the pending ones of each key.
	Destination string `bson:"destination,omitempty"`

	// SendAt and ExpiresAt are the create's send_at and expires_at (issue
	// 34), CanceledAt and ExpiredAt when it was canceled or found expired;
	// each absent when unset.
	SendAt     *time.Time `bson:"send_at,omitempty"`
	ExpiresAt  *time.Time `bson:"expires_at,omitempty"`
	CanceledAt *time.Time `bson:"canceled_at,omitempty"`
	ExpiredAt  *time.Time `bson:"expired_at,omitempty"`

	// Priority is the create's priority (issue 34, point 5), absent for
	// normal. Rank, derived, is its rank (notify.Rank*) while the document
	// has an open event (Due set), absent otherwise: the claims search
	// due_rank_idx, (rank, due, _id), one rank at a time, and the index,
	// sparse, holds only the documents with something to take.
	Priority string `bson:"priority,omitempty"`
	Rank     *int   `bson:"rank,omitempty"`

	// Issue 35: the HTML part, the template version and locale rendered
	// from, and the digest of the request as given; each absent when
	// unset.
	HTML            string `bson:"html,omitempty"`
	Template        string `bson:"template,omitempty"`
	TemplateVersion int    `bson:"template_version,omitempty"`
	Locale          string `bson:"locale,omitempty"`
	Digest          string `bson:"request_digest,omitempty"`
	// Category is the notification's category (issue 35, point 3);
	// absent when unset.
	Category string `bson:"category,omitempty"`
	// Unsubscribe is an email's one-click unsubscribe URL (point 4);
	// absent when unset.
	Unsubscribe string `bson:"unsubscribe_url,omitempty"`
	// Fallback holds the later hops of a create's fallback list (point
	// 5, notify.EncodeHops), FallbackOf the first notification of the
	// chain, FallbackNext the hop made when this one was dead-lettered;
	// each absent when unset. FallbackDue is set, in the write that
	// dead-letters it, while its hop is still to be made (see makeHops).
	Fallback     string `bson:"fallback,omitempty"`
	FallbackOf   int64  `bson:"fallback_of,omitempty"`
	FallbackNext int64  `bson:"fallback_next,omitempty"`
	FallbackDue  bool   `bson:"fallback_due,omitempty"`
}

// claimDoc is the live claim on a notification.
type claimDoc struct {
	AttemptID int64     `bson:"attempt_id"`
	MessageID int64     `bson:"message_id"`
	Until     time.Time `bson:"until"`
}

// eventDoc is one outbox event.
type eventDoc struct {
	ID          int64      `bson:"id"`
	Type        string     `bson:"type"`
	Payload     string     `bson:"payload"`
	OccurredAt  time.Time  `bson:"occurred_at"`
	AvailableAt time.Time  `bson:"available_at"`
	ProcessedAt *time.Time `bson:"processed_at,omitempty"`
	LockedBy    string     `bson:"locked_by,omitempty"`
	LockedUntil *time.Time `bson:"locked_until,omitempty"`
	Retries     int        `bson:"attempts"`
	LastError   string     `bson:"last_error,omitempty"`
	// Traceparent is the W3C trace context of the create (issue 22),
	// absent when the event was written untraced.
	Traceparent string `bson:"traceparent,omitempty"`
	// Priority is its document's, set by a lease (not stored).
	Priority notify.Priority `bson:"-"`
}

// procDoc is a message id applied (ProcessedAt set), leased to a claim, or
// released with a retry mark.
type procDoc struct {
	MessageID   int64      `bson:"message_id"`
	ProcessedAt *time.Time `bson:"processed_at,omitempty"`
	LeaseUntil  *time.Time `bson:"lease_until,omitempty"`
	AttemptID   int64      `bson:"attempt_id,omitempty"`
	// NextRetryCount is the stale-copy guard's mark: once a retry of a
	// claim taken for a copy with retry count k is recorded, it is at
	// least k+1, and a copy of the message with a lower count is spent
	// (answered duplicate). A marked entry is released, never dropped,
	// until the message is settled.
	NextRetryCount int `bson:"next_retry_count,omitempty"`
}

// attDoc is one delivery attempt.
type attDoc struct {
	ID         int64      `bson:"id"`
	Attempt    int        `bson:"attempt"`
	MessageID  int64      `bson:"message_id"`
	StartedAt  time.Time  `bson:"started_at"`
	FinishedAt *time.Time `bson:"finished_at,omitempty"`
	Outcome    string     `bson:"outcome,omitempty"`
	Error      string     `bson:"error,omitempty"`
	// Deferral, Repeats and LastAt: a deferral's kind, and the deferrals
	// of the same kind folded into this one (see notify.Attempt).
	Deferral string     `bson:"deferral,omitempty"`
	Repeats  int        `bson:"repeats,omitempty"`
	LastAt   *time.Time `bson:"last_at,omitempty"`
}

// Event and attempt ids are derived from the notification id: its events
// are ID*eventSpan+1, +2, ... and its attempts ID*attemptSpan+1, ... Ids
// stay unique across the database without a counter, and a message id
// names the notification it belongs to.
const (
	eventSpan   = 1 << 12
	attemptSpan = 1 << 16
	// maxNotificationID keeps the derived ids within int64.
	maxNotificationID = (1 << 62) / attemptSpan
)

func (d *doc) addEvent(n notify.Notification, at time.Time, traceparent string) error {
	payload, err := notify.RequestedPayload(n)
	if err != nil {
		return err
	}
	return d.appendEvent(notify.EventRequested, payload, at, traceparent)
}

// addStatusEvent adds the status event of the settled notification d (sent
// or failed), settled at.
func (d *doc) addStatusEvent(at time.Time) error {
	typ, err := notify.StatusEventType(notify.Status(d.Status))
	if err != nil {
		return err
	}
	payload, err := json.Marshal(notify.StatusEvent{
		NotificationID: notify.FormatID(d.ID), UserID: d.UserID, Channel: d.Channel, Status: d.Status,
		Attempts: d.Attempts, At: at.UTC(), LastError: d.LastError,
	})
	if err != nil {
		return fmt.Errorf("encode %s payload: %w", typ, err)
	}
	return d.appendEvent(typ, payload, at, "")
}

func (d *doc) appendEvent(typ string, payload []byte, at time.Time, traceparent string) error {
	if d.NextEvent+1 >= eventSpan {
		return fmt.Errorf("notification %d has had %d events, the most one can have", d.ID, eventSpan-1)
	}
	d.NextEvent++
	d.Events = append(d.Events, eventDoc{
		ID: d.ID*eventSpan + d.NextEvent, Type: typ, Payload: string(payload),
		OccurredAt: at, AvailableAt: at, Traceparent: traceparent,
	})
	return nil
}

// derive recomputes the derived fields.
func (d *doc) derive() {
	d.Due, d.Oldest, d.Settled, d.Open, d.OpenStatus, d.Rank = nil, nil, nil, 0, 0, nil
	minT := func(p **time.Time, t time.Time) {
		if *p == nil || t.Before(**p) {
			t := t
			*p = &t
		}
	}
	for _, e := range d.Events {
		if e.ProcessedAt != nil {
			minT(&d.Settled, *e.ProcessedAt)
			continue
		}
		d.Open++
		if notify.IsStatusEvent(e.Type) {
			d.OpenStatus++
		}
		minT(&d.Oldest, e.OccurredAt)
		due := e.AvailableAt
		if e.LockedUntil != nil && e.LockedUntil.After(due) {
			due = *e.LockedUntil
		}
		minT(&d.Due, due)
	}
	for _, p := range d.Processed {
		if p.ProcessedAt != nil {
			minT(&d.Settled, *p.ProcessedAt)
		}
	}
	if d.Due != nil {
		r := notify.Priority(d.Priority).Rank()
		d.Rank = &r
	}
	if d.Events == nil {
		d.Events = []eventDoc{}
	}
	if d.Processed == nil {
		d.Processed = []procDoc{}
	}
	if d.History == nil {
		d.History = []attDoc{}
	}
}

func (d *doc) notification() notify.Notification {
	// A document's fallback is written by encodeHops only: it decodes.
	hops, _ := notify.DecodeHops(d.Fallback)
	return notify.Notification{
		ID: d.ID, UserID: d.UserID, Channel: d.Channel, To: d.To, Subject: d.Subject, Body: d.Body,
		Status: notify.Status(d.Status), Attempts: d.Attempts, LastError: d.LastError,
		IdempotencyKey: d.IdempotencyKey, CreatedAt: d.CreatedAt.UTC(), UpdatedAt: d.UpdatedAt.UTC(),
		SentAt: utcp(d.SentAt), FailedAt: utcp(d.FailedAt),
		SendAt: utcp(d.SendAt), ExpiresAt: utcp(d.ExpiresAt), CanceledAt: utcp(d.CanceledAt), ExpiredAt: utcp(d.ExpiredAt),
		Priority: notify.Priority(d.Priority).OrDefault(),
		HTML:     d.HTML, Template: d.Template, TemplateVersion: d.TemplateVersion, Locale: d.Locale, Digest: d.Digest,
		Category: d.Category, Unsubscribe: d.Unsubscribe,
		Fallback: hops, FallbackOf: d.FallbackOf, FallbackNext: d.FallbackNext,
	}
}

func utcp(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func (d *doc) processed(msg int64) *procDoc {
	for i := range d.Processed {
		if d.Processed[i].MessageID == msg {
			return &d.Processed[i]
		}
	}
	return nil
}

// markProcessed records msg as applied at t, unless it is already.
func (d *doc) markProcessed(msg int64, t time.Time) bool {
	if p := d.processed(msg); p != nil {
		if p.ProcessedAt != nil {
			return false
		}
		p.ProcessedAt, p.LeaseUntil, p.AttemptID = &t, nil, 0
		return true
	}
	d.Processed = append(d.Processed, procDoc{MessageID: msg, ProcessedAt: &t})
	return true
}

// dropLease releases the leased (unprocessed) message ids pred selects:
// an entry without a retry mark goes, a marked one stays with its mark.
func (d *doc) dropLease(pred func(p procDoc) bool) {
	d.Processed = slices.DeleteFunc(d.Processed, func(p procDoc) bool {
		return p.ProcessedAt == nil && p.NextRetryCount == 0 && pred(p)
	})
	for i := range d.Processed {
		if p := &d.Processed[i]; p.ProcessedAt == nil && pred(*p) {
			p.LeaseUntil, p.AttemptID = nil, 0
		}
	}
}

// key is the _id of notification id (see doc.Key).
func key(id int64) string { return fmt.Sprintf("%019d", id) }

// keys is key of each id.
func keys(ids []int64) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = key(id)
	}
	return out
}

// idOnly projects a document to its id.
var idOnly = bson.D{{Key: "id", Value: 1}}

// revision is the record that claims one revision of a notification
// document for one writer (see the package doc).
type revision struct {
	ID  string    `bson:"_id"`
	At  time.Time `bson:"at"`
	Doc doc       `bson:"doc"`
}

// rollForwardAfter is how old a claimed revision must be, with the
// document still before it, for another writer to write it in place of
// its writer, presumed dead.
const rollForwardAfter = 5 * time.Second

// errNoChange is what a change function returns to write nothing.
var errNoChange = errors.New("no change")

// load reads one notification document; found is false when there is none.
func (s *Store) load(ctx context.Context, id int64) (doc, bool, error) {
	var d doc
	err := s.n.FindOne(ctx, bson.D{{Key: "_id", Value: key(id)}}).Decode(&d)
	if errors.Is(err, mgo.ErrNoDocuments) {
		return doc{}, false, nil
	}
	if err != nil {
		return doc{}, false, classify(err)
	}
	return d, true, nil
}

// change applies fn to notification id's current document and writes the
// result as its next revision; fn returning errNoChange writes nothing. fn
// may run several times (after a lost race) and must depend only on the
// document it is given. found is false when there is no such notification
// (fn is not called).
func (s *Store) change(ctx context.Context, id int64, fn func(d *doc) error) (found, written bool, err error) {
	for try := 0; ; try++ {
		d, ok, err := s.load(ctx, id)
		if err != nil || !ok {
			return ok, false, err
		}
		prev := d.Rev
		if err := fn(&d); errors.Is(err, errNoChange) {
			return true, false, nil
		} else if err != nil {
			return true, false, err
		}
		d.Rev = prev + 1
		d.derive()
		won, err := s.claimRevision(ctx, &d)
		if err != nil {
			return true, false, err
		}
		if !won {
			if err := pause(ctx, try); err != nil {
				return true, false, err
			}
			continue
		}
		res, err := s.n.ReplaceOne(ctx, bson.D{{Key: "_id", Value: key(id)}, {Key: "rev", Value: prev}}, d)
		if err != nil {
			return true, false, fmt.Errorf("write notification %d: %w", id, classify(err))
		}
		// MatchedCount 0: the document is past prev already, so another
		// writer rolled this writer's revision forward (only this
		// writer's state exists for it): written all the same.
		_ = res
		return true, true, nil
	}
}

// claimRevision inserts the revision record of d; false when another
// writer has it (after rolling it forward if its writer seems dead).
func (s *Store) claimRevision(ctx context.Context, d *doc) (bool, error) {
	rk := fmt.Sprintf("%d@%d", d.ID, d.Rev)
	_, err := s.revs.InsertOne(ctx, revision{ID: rk, At: time.Now().UTC(), Doc: *d})
	if err == nil {
		return true, nil
	}
	if !mgo.IsDuplicateKeyError(err) {
		return false, fmt.Errorf("claim revision %s: %w", rk, classify(err))
	}
	var r revision
	if err := s.revs.FindOne(ctx, bson.D{{Key: "_id", Value: rk}}).Decode(&r); err != nil {
		return false, nil
	}
	if time.Since(r.At) < rollForwardAfter {
		return false, nil
	}
	// Its writer claimed it long ago and the document may still be
	// before it: write it as that writer would have.
	_, err = s.n.ReplaceOne(ctx, bson.D{{Key: "_id", Value: key(d.ID)}, {Key: "rev", Value: d.Rev - 1}}, r.Doc)
	return false, classify(err)
}

// pause waits a little before a retry of a lost race.
func pause(ctx context.Context, try int) error {
	if try > 2000 {
		return fmt.Errorf("gave up after %d lost races", try)
	}
	d := time.Duration(min(try+1, 20)) * time.Millisecond
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// findAll runs a find on coll and decodes every document it matches.
func findAll[T any](ctx context.Context, coll *mgo.Collection, filter any, opts ...options.Lister[options.FindOptions]) ([]T, error) {
	cur, err := coll.Find(ctx, filter, opts...)
	if err != nil {
		return nil, classify(err)
	}
	var out []T
	if err := cur.All(ctx, &out); err != nil {
		return nil, classify(err)
	}
	return out, nil
}
