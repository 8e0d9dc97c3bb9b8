package client

import (
	"encoding/json"
	"time"
)

// Status is a notification's state.
type Status string

// The statuses of a notification.
const (
	StatusPending Status = "pending"
	StatusSent    Status = "sent"
	// StatusFailed is a dead letter: every attempt failed, or one failed
	// for good.
	StatusFailed Status = "failed"
	// StatusScheduled is pending with a SendAt still ahead.
	StatusScheduled Status = "scheduled"
	// StatusCanceled: canceled (Client.Cancel) before a send started.
	StatusCanceled Status = "canceled"
	// StatusExpired: its ExpiresAt passed before a send started.
	StatusExpired Status = "expired"
	// StatusSuppressed: its user had opted out of its category on its
	// channel at create; it is never sent.
	StatusSuppressed Status = "suppressed"
)

// Priority ranks a notification against the others due at the same time:
// every due high one is delivered before any normal one, every due normal
// one before any bulk one.
type Priority string

// The priorities; a create without one is normal.
const (
	PriorityHigh   Priority = "high"
	PriorityNormal Priority = "normal"
	PriorityBulk   Priority = "bulk"
)

// Notification is a notification as the API shows it. A listing leaves
// Body empty; Get fills it.
type Notification struct {
	ID       string `json:"id"`
	UserID   string `json:"user_id"`
	Channel  string `json:"channel"`
	To       string `json:"to"`
	Subject  string `json:"subject"`
	Body     string `json:"body"`
	Status   Status `json:"status"`
	Attempts int    `json:"attempts"`
	// LastError is the current failure, empty while there is none (a
	// redrive clears it; Attempts has the history).
	LastError string     `json:"last_error"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
	SentAt    *time.Time `json:"sent_at"`
	// FailedAt is when it was dead-lettered; nil unless Status is failed.
	FailedAt *time.Time `json:"failed_at"`
	// SendAt is when it is due (the create's SendAt, or the end of its
	// quiet hours); nil: at once.
	SendAt *time.Time `json:"send_at"`
	// ExpiresAt is the create's ExpiresAt, nil when none.
	ExpiresAt *time.Time `json:"expires_at"`
	// CanceledAt and ExpiredAt are when it was canceled or found expired.
	CanceledAt *time.Time `json:"canceled_at"`
	ExpiredAt  *time.Time `json:"expired_at"`
	// Priority is the create's priority (normal when it gave none).
	Priority Priority `json:"priority"`
	// Category is the create's category ("" when it gave none).
	Category string `json:"category,omitempty"`
	// HTML is an email's HTML part as sent ("" when it has none). Only
	// Get fills it.
	HTML string `json:"html,omitempty"`
	// Template, TemplateVersion and Locale name the template version and
	// the locale of the variant the notification was rendered from (""
	// and 0 for one created with its content; Locale is "" for a
	// template's default variant too). Only Get fills them.
	Template        string `json:"template,omitempty"`
	TemplateVersion int    `json:"template_version,omitempty"`
	Locale          string `json:"locale,omitempty"`
	// FallbackChannels lists the channels of the create's fallback list
	// (CreateRequest.Channels) still to come after this one; FallbackOf
	// is the id of the first notification of its chain (for a hop);
	// FallbackNext the id of the hop made when this one was
	// dead-lettered. Each empty when unset.
	FallbackChannels []string `json:"fallback_channels,omitempty"`
	FallbackOf       string   `json:"fallback_of,omitempty"`
	FallbackNext     string   `json:"fallback_next,omitempty"`
	// Waiting is why a pending notification waits: its destination (or
	// its channel's provider) is failing or disabled. Only Get fills it;
	// nil when it waits on nothing.
	Waiting *Waiting `json:"waiting,omitempty"`
}

// Waiting is the record of the destination a pending notification waits
// on, as GET /destinations lists it.
type Waiting struct {
	// Destination is the record's key: the notification's destination, or
	// its channel's name when the channel's one provider is down.
	Destination string `json:"destination"`
	// State is "failing" or "disabled".
	State  string    `json:"state"`
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
}

// CreateRequest is a notification to send. Each channel has its fields:
// email (To an address, Subject, Body), webhook (To an http(s) URL, Body or
// BodyJSON), telegram (To a chat id or @channel, Body).
type CreateRequest struct {
	UserID  string
	Channel string
	To      string
	Subject string
	Body    string
	// BodyJSON, when set, is sent as the body's JSON value instead of Body
	// (the webhook channel takes any JSON value).
	BodyJSON json.RawMessage
	// IdempotencyKey makes the create safe to send again: the same key with
	// the same request answers the same notification. Create sets a fresh
	// one (NewIdempotencyKey) when it is empty, so that its own retries never
	// create twice.
	IdempotencyKey string
	// SendAt, when set, is the earliest time to deliver; a time in the past
	// sends now.
	SendAt *time.Time
	// ExpiresAt, when set, is the latest time a send may start; after it
	// the notification ends expired.
	ExpiresAt *time.Time
	// TimeZone (an IANA name) and QuietHours defer the send out of the
	// recipient's quiet window; Urgent bypasses it.
	TimeZone   string
	QuietHours *QuietHours
	Urgent     bool
	// Priority is high, normal or bulk; empty is normal.
	Priority Priority
	// Template, when set, renders Subject and Body (leave them empty) from
	// the template of that name (PUT /templates/{name}) with Data, a
	// value that encodes as a JSON object, in the recipient's locale.
	// TemplateVersion pins a version (0: the newest).
	Template        string
	TemplateVersion int
	Data            any
	// Category, when set, is the notification's category: a user who
	// opted out of it on this channel does not receive it (the create
	// answers it suppressed), unless the server lists it as required.
	Category string
	// Channels, instead of Channel, is a fallback list: channels in
	// order of preference. The server sends on the first the user's
	// recipient has an address for and allows, and when that one is
	// dead-lettered creates the next as a notification of its own
	// (Notification.FallbackNext). It needs Template and no To.
	Channels []string
}

// QuietHours is a daily quiet window on the wall clock of
// CreateRequest.TimeZone, "HH:MM" to "HH:MM" (over midnight when Start is
// after End).
type QuietHours struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

// MarshalJSON writes the API's request body (without the key, a header).
func (r CreateRequest) MarshalJSON() ([]byte, error) {
	body := json.RawMessage(r.BodyJSON)
	if len(body) == 0 {
		b, err := marshal(r.Body)
		if err != nil {
			return nil, err
		}
		body = b
	}
	if r.Template != "" && len(r.BodyJSON) == 0 && r.Body == "" {
		body = nil // the template renders it
	}
	v := struct {
		UserID     string          `json:"user_id"`
		Channel    string          `json:"channel"`
		To         string          `json:"to"`
		Subject    string          `json:"subject,omitempty"`
		Body       json.RawMessage `json:"body,omitempty"`
		SendAt     *time.Time      `json:"send_at,omitempty"`
		ExpiresAt  *time.Time      `json:"expires_at,omitempty"`
		TimeZone   string          `json:"time_zone,omitempty"`
		QuietHours *QuietHours     `json:"quiet_hours,omitempty"`
		Urgent     bool            `json:"urgent,omitempty"`
		Priority   Priority        `json:"priority,omitempty"`
		Template   string          `json:"template,omitempty"`
		Version    int             `json:"template_version,omitempty"`
		Data       any             `json:"data,omitempty"`
		Category   string          `json:"category,omitempty"`
		Channels   []string        `json:"channels,omitempty"`
	}{r.UserID, r.Channel, r.To, r.Subject, body, r.SendAt, r.ExpiresAt, r.TimeZone, r.QuietHours, r.Urgent, r.Priority,
		r.Template, r.TemplateVersion, r.Data, r.Category, r.Channels}
	return marshal(v)
}

// Created is the answer to a create.
type Created struct {
	Notification
	// Replayed is true when an earlier create with the same idempotency key
	// was answered again: nothing new was written.
	Replayed bool
}

// ListOptions filter a listing of notifications (GET /notifications); the
// zero value lists every notification, newest first, 50 a page.
type ListOptions struct {
	UserID        string
	Status        Status
	Channel       string
	CreatedAfter  time.Time
	CreatedBefore time.Time
	// Limit is the page size, 1 to 500 (0: the server's default, 50).
	Limit int
	// Cursor resumes after the page that gave it (NextCursor), with the
	// same filters.
	Cursor string
}

// Page is one page of notifications.
type Page struct {
	Items []Notification `json:"items"`
	// NextCursor resumes the listing; empty when it is done.
	NextCursor string `json:"next_cursor"`
}

// Attempt is one delivery attempt of a notification.
type Attempt struct {
	Attempt    int        `json:"attempt"`
	MessageID  string     `json:"message_id"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	// Outcome is sent, retry, dead or deferred; empty while in flight.
	Outcome string `json:"outcome"`
	Error   string `json:"error"`
	// Repeats counts the deferrals of the same kind folded into this one
	// (the same outage probed again, with no other attempt between);
	// LastAt is when the latest finished, nil when Repeats is 0.
	Repeats int        `json:"repeats"`
	LastAt  *time.Time `json:"last_at"`
}

// AttemptOptions page a notification's attempts.
type AttemptOptions struct {
	// Limit is the page size, 1 to 500 (0: the server's default, 50).
	Limit int
	// Cursor resumes after the page that gave it.
	Cursor string
}

// AttemptPage is one page of a notification's attempts.
type AttemptPage struct {
	Items      []Attempt `json:"items"`
	NextCursor string    `json:"next_cursor"`
}

// DeadLetter is a notification in status failed, as the dead-letter listing
// shows it.
type DeadLetter struct {
	ID        string     `json:"id"`
	To        string     `json:"to"`
	Attempts  int        `json:"attempts"`
	LastError string     `json:"last_error"`
	FailedAt  *time.Time `json:"failed_at"`
}

// DeadLetterOptions filter a listing of dead letters (GET /dead-letters).
type DeadLetterOptions struct {
	// Since keeps those that failed within this duration (0: any time).
	Since time.Duration
	// Error keeps those whose last error contains this text
	// (case-insensitive).
	Error string
	// Limit is the page size, 1 to 500 (0: the server's default, 100).
	Limit int
	// Cursor resumes after the page that gave it, with the same filters.
	Cursor string
}

// DeadLetterPage is one page of dead letters.
type DeadLetterPage struct {
	Items      []DeadLetter `json:"items"`
	NextCursor string       `json:"next_cursor"`
}

// RedriveRequest selects dead letters to send again: IDs, or All, or the
// filters. All with IDs is refused.
type RedriveRequest struct {
	IDs []string
	All bool
	// Since, Error and Limit select as DeadLetterOptions do; Limit up to
	// 10000.
	Since  time.Duration
	Error  string
	Limit  int
	DryRun bool
}

// MarshalJSON writes the API's request body.
func (r RedriveRequest) MarshalJSON() ([]byte, error) {
	v := struct {
		IDs    []string `json:"ids,omitempty"`
		All    bool     `json:"all,omitempty"`
		Since  string   `json:"since,omitempty"`
		Error  string   `json:"error,omitempty"`
		Limit  int      `json:"limit,omitempty"`
		DryRun bool     `json:"dry_run,omitempty"`
	}{IDs: r.IDs, All: r.All, Error: r.Error, Limit: r.Limit, DryRun: r.DryRun}
	if r.Since != 0 {
		v.Since = r.Since.String()
	}
	return marshal(v)
}

// Why a redrive skipped a notification (Skipped.Reason).
const (
	SkipNotFound    = "not_found"
	SkipNotFailed   = "not_failed"
	SkipFilteredOut = "filtered_out"
)

// RedriveResult says what a redrive did.
type RedriveResult struct {
	// Selected counts the dead letters the selection matched.
	Selected int      `json:"selected"`
	Redriven []string `json:"redriven"`
	// Skipped lists every named or selected notification that was not
	// redriven, with why.
	Skipped          []Skipped `json:"skipped"`
	RemovedFromQueue int       `json:"removed_from_queue"`
	DryRun           bool      `json:"dry_run"`
}

// Skipped is a notification a redrive did not redrive.
type Skipped struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// Destination is a destination that is not up (GET /destinations): a
// webhook endpoint (its scheme://host:port) or a channel with one provider
// (keyed by the channel's name), failing or disabled.
type Destination struct {
	Key     string `json:"key"`
	Channel string `json:"channel"`
	// State is "failing" or "disabled".
	State  string    `json:"state"`
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
	// Pending counts its notifications still pending.
	Pending int64 `json:"pending"`
}

// DestinationOptions filter and page the destinations listing.
type DestinationOptions struct {
	// State keeps the "failing" or the "disabled" ones (empty: both).
	State string
	// Limit is the page size, 1 to 500 (0: the server's default, 50).
	Limit int
	// Cursor resumes after the page that gave it, with the same State.
	Cursor string
}

// DestinationPage is one page of the destinations listing.
type DestinationPage struct {
	Items      []Destination `json:"items"`
	NextCursor string        `json:"next_cursor"`
}
