package notify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// EventRequested is the type of the outbox event written with every new
// notification.
const EventRequested = "notification.requested"

// Event is one outbox row as the relay sees it.
type Event struct {
	ID         int64
	Type       string
	Payload    []byte
	OccurredAt time.Time
	// Traceparent is the W3C trace context the event was written in
	// (the create's span), "" when it was written untraced. The relay
	// replaces it with its publish span's before it hands the event on,
	// and a transport carries it as the traceparent header.
	Traceparent string
	// Priority is the row's priority ("" is normal): a claim returns its
	// rows highest first, and a transport carries it as far as its
	// broker can.
	Priority Priority
}

// Requested is the payload of a notification.requested event.
type Requested struct {
	NotificationID string `json:"notification_id"`
	UserID         string `json:"user_id"`
	Channel        string `json:"channel"`
	To             string `json:"to"`
	Subject        string `json:"subject"`
	Body           string `json:"body"`
	// HTML is the email's HTML part, absent when it has none.
	HTML string `json:"html,omitempty"`
	// Unsubscribe is an email's one-click unsubscribe URL (its
	// List-Unsubscribe header, RFC 8058), absent when it has none.
	Unsubscribe string `json:"unsubscribe,omitempty"`
	// RequestID is the X-Request-Id of the create that wrote the event
	// (absent from events of a redrive or a reconcile, and from those
	// written before it existed). A worker logs it with every line of the
	// delivery. It rides in the payload rather than in a column: it is
	// needed only where the payload goes, and costs no migration.
	RequestID string `json:"request_id,omitempty"`
}

// NewRequested builds the event payload for a notification.
func NewRequested(n Notification) Requested {
	return Requested{
		NotificationID: FormatID(n.ID),
		UserID:         n.UserID,
		Channel:        n.Channel,
		To:             n.To,
		Subject:        n.Subject,
		Body:           n.Body,
		HTML:           n.HTML,
		Unsubscribe:    n.Unsubscribe,
		RequestID:      n.RequestID,
	}
}

// Message is one delivery as a worker receives it, whatever the transport.
type Message struct {
	// ID is the outbox id: the message id on the broker and the key of
	// processed_messages.
	ID int64
	// Type is the event type.
	Type string
	// Payload is the event payload, undecoded.
	Payload []byte
	// RetryCount is how many retries came before this delivery (0 on the
	// first).
	RetryCount int
	// OccurredAt is when the event was written (with its notification);
	// zero when the transport cannot tell.
	OccurredAt time.Time
	// PublishedAt is when the broker took this copy of the message from
	// the relay, for the time-in-broker histogram; zero when the
	// transport cannot tell (the outbox table has no broker).
	PublishedAt time.Time
	// Traceparent is the W3C trace context the message carries (the
	// traceparent header, or the outbox row's column), "" when none.
	// Retry copies keep it, so every attempt joins the create's trace.
	Traceparent string
	// Priority is the message's priority ("", normal, when the transport
	// cannot tell): the worker queues what it admits highest first.
	Priority Priority
}

// OutboxKey names one outbox row to a store: its id, and when it was
// written. PostgreSQL partitions the outbox by day on occurred_at, and a
// statement that names rows by id alone is planned over, and probes, every
// partition; with the time as well it touches only the row's. A zero
// OccurredAt is allowed and costs only that: the row is found by its id.
type OutboxKey struct {
	ID         int64
	OccurredAt time.Time
}

// Key returns the outbox row m was claimed from.
func (m Message) Key() OutboxKey { return OutboxKey{ID: m.ID, OccurredAt: m.OccurredAt} }

// Decode checks a message's type and decodes its payload. Every error it
// returns is permanent: the message can never be processed and goes to the
// dead letters at once. Its checks are the ones every channel shares (the
// API validated the rest, and each channel's sender refuses what it cannot
// send): a valid notification of any channel decodes.
func (m Message) Decode() (Requested, int64, error) {
	if m.Type != EventRequested {
		return Requested{}, 0, Permanent(fmt.Errorf("unknown event type %q", m.Type))
	}
	var r Requested
	dec := json.NewDecoder(bytes.NewReader(m.Payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Requested{}, 0, Permanent(fmt.Errorf("decode payload: %v", err))
	}
	if dec.More() {
		return Requested{}, 0, Permanent(fmt.Errorf("decode payload: trailing data"))
	}
	id, ok := ParseID(r.NotificationID)
	if !ok {
		return Requested{}, 0, Permanent(fmt.Errorf("payload: invalid notification_id %q", r.NotificationID))
	}
	if err := r.check(); err != nil {
		return Requested{}, 0, Permanent(fmt.Errorf("payload: %v", err))
	}
	if !ValidRequestID(r.RequestID) {
		r.RequestID = "" // a log aid only: an odd one is dropped, never fatal
	}
	return r, id, nil
}

// Outcome is what became of one delivery.
type Outcome string

// The outcomes a worker reports; they are also the values of the outcome
// label of herald_worker_deliveries_total.
const (
	OutcomeSent      Outcome = "sent"
	OutcomeRetried   Outcome = "retried"
	OutcomeDead      Outcome = "dead"
	OutcomeDuplicate Outcome = "duplicate"
)

// ScheduledCap bounds the count of scheduled rows OutboxStats makes.
const ScheduledCap = 10_000

// OutboxStats describes the backlog: outbox rows not yet handed on.
//
// The backlog is the rows that are due (available_at passed) and not yet
// processed: a row whose available_at is ahead (a notification scheduled
// for later, a retry waiting out its backoff, a row leased to a batch in
// flight) is not waiting for anyone, and is counted in Scheduled instead,
// so that sends scheduled for next month neither look like a stuck relay
// nor make the API refuse creates (HERALD_MAX_BACKLOG).
type OutboxStats struct {
	// Unprocessed is the number of due rows with processed_at NULL.
	Unprocessed int64
	// UnprocessedStatus is how many of them are status events
	// (notification.sent, notification.failed): waiting for their own
	// relay, not for a delivery.
	UnprocessedStatus int64
	// OldestAge is how long the one due the longest has been due (since
	// its available_at; 0 when there is none).
	OldestAge time.Duration
	// Scheduled is the number of unprocessed rows not due yet (scheduled
	// sends, retries waiting out their backoff, rows leased to a batch in
	// flight), counted up to ScheduledCap (ScheduledCapped past it): the
	// stats are read often (HERALD_MAX_BACKLOG's check, every 250 ms), and
	// must not walk a million scheduled rows.
	Scheduled       int64
	ScheduledCapped bool
	// DeadLetters is the number of notifications in status failed.
	DeadLetters int64
}

// check is the channel-neutral check of a payload: the fields every
// channel has are present and hold text.
func (r Requested) check() error {
	if err := checkText("user_id", r.UserID, MaxUserIDLen, false); err != nil {
		return err
	}
	if err := checkText("channel", r.Channel, MaxUserIDLen, false); err != nil {
		return err
	}
	if err := checkText("to", r.To, MaxBodyLen, false); err != nil {
		return err
	}
	if r.Subject != "" {
		if err := checkText("subject", r.Subject, MaxSubjectLen, false); err != nil {
			return err
		}
	}
	return CheckBody(r.Body)
}
