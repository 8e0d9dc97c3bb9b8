package notify

import (
	"context"
	"strconv"
	"time"
)

// Status is the delivery state of a notification.
type Status string

// The statuses a notification moves through: pending until a worker sends it
// (sent) or gives up on it (failed, i.e. dead-lettered); canceled when a
// client canceled it before a send started, expired when its expires_at
// passed before a send started; suppressed when its recipient had opted out
// of its category on its channel at create (it is never sent).
//
// Scheduled is never stored: a store keeps a notification whose send_at
// is still ahead as pending, and StatusAt shows it as scheduled until
// then. The moment it turns pending is its send_at itself, whatever the
// relay or the workers are doing, and nothing has to be written for it
// (see StatusAt).
const (
	StatusPending   Status = "pending"
	StatusScheduled Status = "scheduled"
	StatusSent      Status = "sent"
	StatusFailed    Status = "failed"
	StatusCanceled  Status = "canceled"
	StatusExpired   Status = "expired"
	// StatusSuppressed is decided at create, in the create's transaction:
	// the notification is stored suppressed with its status event and no
	// notification.requested event, so no worker ever sees it.
	StatusSuppressed Status = "suppressed"
)

// StatusAt is n's status as shown at t: scheduled while it is pending and
// its send_at is after t, its stored status otherwise.
func (n Notification) StatusAt(t time.Time) Status {
	if n.Status == StatusPending && n.SendAt != nil && n.SendAt.After(t) {
		return StatusScheduled
	}
	return n.Status
}

// ChannelEmail is the only delivery channel so far.
const ChannelEmail = "email"

// Notification is one stored notification.
type Notification struct {
	ID             int64
	UserID         string
	Channel        string
	To             string
	Subject        string
	Body           string
	Status         Status
	Attempts       int
	LastError      string
	IdempotencyKey string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	SentAt         *time.Time
	// SendAt is when the notification is due, as the create asked
	// (send_at, or the end of its quiet hours); nil: at once. It is not
	// delivered before it.
	SendAt *time.Time
	// ExpiresAt, when set, is when the notification stops being worth
	// sending: no send starts after it, and it ends expired.
	ExpiresAt *time.Time
	// CanceledAt and ExpiredAt are when it was canceled or found expired
	// (nil otherwise).
	CanceledAt *time.Time
	ExpiredAt  *time.Time
	// Priority is high, normal or bulk (never "": a store reads the
	// stored rank back).
	Priority Priority
	// FailedAt is when the notification was dead-lettered (nil unless failed).
	FailedAt *time.Time
	// Waiting, read by Get only, is why a pending notification waits: its
	// destination (or its channel's provider) is failing or disabled; nil
	// otherwise.
	Waiting *Waiting
	// HTML is the email's HTML part ("" for none).
	HTML string
	// Template, TemplateVersion and Locale name the template version and
	// locale variant the notification was rendered from ("", 0, "" for
	// one created with its content).
	Template        string
	TemplateVersion int
	Locale          string
	// Digest, when not empty, is the digest of the create request as the
	// client gave it (NewNotification.Digest), which an idempotent replay
	// compares instead of the resolved fields.
	Digest string
	// Category is the notification's category ("" for none): what a
	// recipient's preferences opt in or out of, per channel.
	Category string
	// Unsubscribe is an email's one-click unsubscribe URL (its
	// List-Unsubscribe header), rendered at create; "" for none.
	Unsubscribe string
	// Fallback holds the hops of its create's fallback list still to
	// come after it (channels, see Hop); FallbackOf is the id of the
	// first notification of its chain (0 for that first one or one with
	// no fallback); FallbackNext is the id of the hop made when it was
	// dead-lettered (0 until then).
	Fallback     []Hop
	FallbackOf   int64
	FallbackNext int64
	// RequestID is the id of the API request that created it (X-Request-Id),
	// set on the notification a create returns and carried by its outbox
	// event to the delivery's log lines; it is not stored with the
	// notification, so a read leaves it empty.
	RequestID string
}

// FormatID renders a notification or message id the way the API and the
// broker show it: decimal.
func FormatID(id int64) string { return strconv.FormatInt(id, 10) }

// ParseID parses an id rendered by FormatID. It reports false for anything
// that is not a positive decimal int64.
func ParseID(s string) (int64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, false
	}
	return id, true
}

// NewNotification is what a store needs to create a notification and its
// outbox event in one transaction.
type NewNotification struct {
	Request CreateRequest
	// IdempotencyKey, when not empty, makes the create idempotent: a second
	// create by the same user with the same key and the same request, within
	// IdempotencyWindow of the first, returns the first notification; with
	// a different request it fails with ErrConflict. Keys are scoped to the
	// user (another user's key is another key), and once the window has
	// passed the key makes a new notification (and the old one loses it).
	IdempotencyKey string
	// RequestID, when not empty, is the creating request's id; the outbox
	// event carries it (Requested.RequestID).
	RequestID string
	// Fault, when not empty, names a debug fault to inject inside the
	// transaction (FaultAfterOutboxInsert). Only the API sets it, and only
	// when HERALD_DEBUG_FAULTS=1.
	Fault string
	// Traceparent, when not empty, is the W3C trace context of the create,
	// stored with the outbox event so that its delivery joins the trace.
	Traceparent string
	// Destination, when not empty, is the destination key the
	// notification goes to (see Destination.Key), stored with it so that
	// a destination's pending notifications can be counted. The API sets
	// it from the channel's ChannelSpec.Destination.
	Destination string
	// RecipientRevision, when not 0, is the revision of the recipient of
	// Request.UserID that the create read (its address, locale or time
	// zone): the store writes the notification only while the recipient
	// is still at that revision, in the same transaction (a shared lock on
	// the recipient where the store has them), and fails with
	// ErrRecipientChanged otherwise, so that a create never commits an
	// address a concurrent change or erasure has removed.
	RecipientRevision int64
	// Digest, when not empty, is a digest of the request as the client
	// gave it, for a create whose stored fields were resolved (from a
	// recipient or a template): an idempotent replay compares it, not
	// the resolved fields, which a later recipient or template change
	// would make differ.
	Digest string
	// CheckPreference makes the store read, in the create's transaction,
	// the preference of Request.UserID for Request.Category on
	// Request.Channel: when the user opted out, the notification is
	// written suppressed, with its notification.suppressed status event
	// and no notification.requested event. The API sets it for a create
	// with a category that is not required.
	CheckPreference bool
	// Fallback lists the later channels of a create's fallback list
	// (channels), resolved: the store keeps them with the notification
	// and, in the transaction that dead-letters it, creates the first
	// (Notification.NextHop). FallbackOf, for a hop, is the id of the
	// first notification of its chain.
	Fallback   []Hop
	FallbackOf int64
}

// IdempotencyWindow is how long an idempotency key answers with the
// notification it first created: a day, as payment APIs do (Stripe keeps
// keys 24 hours). Clients retry within seconds or minutes, so a day covers
// every honest retry; a key that never expired would replay yesterday's
// notification for a natural key reused today ("daily-digest-u42") and
// keep every key indexed for ever.
const IdempotencyWindow = 24 * time.Hour

// FaultAfterOutboxInsert makes a create fail after its outbox INSERT, inside
// the transaction, so that neither row survives.
const FaultAfterOutboxInsert = "after-outbox-insert"

// Created is the result of a create.
type Created struct {
	Notification Notification
	// Replayed is true when an earlier create with the same idempotency key
	// is answered again; nothing new was written.
	Replayed bool
}

// DeadLetters lists and redrives dead letters: the seam both the API (GET
// /dead-letters, POST /dead-letters/redrive) and the console use, so that
// they redrive exactly alike. internal/deadletter's Service implements it.
type DeadLetters interface {
	List(ctx context.Context, f DeadLetterFilter) ([]Notification, error)
	Redrive(ctx context.Context, sel RedriveSelection) (RedriveResult, error)
}

// DeadLetterFilter selects dead letters (notifications in status failed).
type DeadLetterFilter struct {
	// IDs, when not empty, selects exactly these notifications.
	IDs []int64
	// Since, when not zero, keeps those that failed at or after it.
	Since time.Time
	// ErrorContains, when not empty, keeps those whose last_error contains
	// it (case-insensitive).
	ErrorContains string
	// Limit caps the result (0: no cap).
	Limit int
	// After, when set, resumes a listing: only dead letters strictly after
	// this position in the order (failed earlier) are listed.
	After *DeadLetterPosition
}

// DeadLetterPosition is a dead letter's place in a listing's order, newest
// failure first: by failed_at descending, then id descending.
type DeadLetterPosition struct {
	FailedAt time.Time
	ID       int64
}

// PruneResult counts what a retention pass deleted.
type PruneResult struct {
	// Outbox counts the outbox rows deleted one by one.
	Outbox int64
	// OutboxPartitions counts the outbox partitions dropped whole (their
	// rows are not in Outbox): PostgreSQL's daily partitions; 0 on the
	// other stores.
	OutboxPartitions int64
	// ProcessedMessages counts the processed_messages rows deleted.
	ProcessedMessages int64
}

// RedriveSelection says which dead letters to redrive.
type RedriveSelection struct {
	Filter DeadLetterFilter
	// All selects every dead letter; it is required when Filter is empty,
	// so that redriving everything is always asked for.
	All bool
	// DryRun reports the selection without changing anything.
	DryRun bool
	// Progress, when set, is called after each notification with the count
	// done and the total.
	Progress func(done, total int)
}

// Empty reports whether the selection names nothing at all.
func (s RedriveSelection) Empty() bool {
	f := s.Filter
	return !s.All && len(f.IDs) == 0 && f.Since.IsZero() && f.ErrorContains == "" && f.Limit == 0
}

// RedriveResult says what a redrive did.
type RedriveResult struct {
	// Selected is the number of dead letters the selection matched.
	Selected int
	// Redriven lists the notifications moved back to pending (with DryRun,
	// those that would be).
	Redriven []int64
	// Skipped lists selected notifications that were no longer failed when
	// their turn came (sent or redriven meanwhile).
	Skipped []int64
	// RemovedFromQueue counts the messages removed from the broker's
	// dead-letter queue.
	RemovedFromQueue int
	// DryRun is true when nothing was changed.
	DryRun bool
}
