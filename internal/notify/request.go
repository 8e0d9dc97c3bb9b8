package notify

import (
	"net/mail"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits on the fields of a create request, in bytes.
const (
	MaxUserIDLen  = 255
	MaxToLen      = 320
	MaxSubjectLen = 998
	MaxBodyLen    = 512 << 10
)

// CreateRequest is a client's request to send a notification.
type CreateRequest struct {
	UserID  string `json:"user_id"`
	Channel string `json:"channel"`
	To      string `json:"to"`
	// Subject is empty for a channel that has none.
	Subject string `json:"subject"`
	// Body is the text to send; for a channel that takes a JSON body
	// (webhook), a body given as another JSON value is held as its compact
	// JSON text.
	Body string `json:"body"`
	// SendAt, when set, is the earliest time to deliver (send_at; a time
	// in the past means now). The API puts here the end of the quiet
	// hours when they defer the send.
	SendAt *time.Time `json:"send_at,omitempty"`
	// ExpiresAt, when set, is the latest time a send may start
	// (expires_at).
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Quiet, when set, is the recipient's quiet window (time_zone and
	// quiet_hours): the API defers SendAt to its end unless Urgent. It is
	// not stored; SendAt says what it did.
	Quiet *QuietHours `json:"-"`
	// Urgent bypasses Quiet.
	Urgent bool `json:"-"`
	// Priority ranks the notification against the others due at the
	// same time (high, normal, bulk); "" is normal.
	Priority Priority `json:"priority,omitempty"`
	// HTML is the email's HTML part, rendered from a template's html
	// (a client does not give it directly); "" for none.
	HTML string `json:"-"`
	// Template, when set, names the template the subject, body and HTML
	// are rendered from (with Data); after the rendering, TemplateVersion
	// and Locale say which version and locale variant were used. Before
	// it, TemplateVersion is the version the create pinned (0: the
	// latest).
	Template        string `json:"-"`
	TemplateVersion int    `json:"-"`
	Locale          string `json:"-"`
	// Data is the template data, a JSON object as given.
	Data string `json:"-"`
	// Category, when set, is the notification's category (a name like a
	// template's, see ValidCategory): a recipient may opt out of it per
	// channel, unless it is required.
	Category string `json:"-"`
	// Unsubscribe is the email's one-click unsubscribe URL, rendered by
	// the API at create for an email with a category (a client does not
	// give it); "" for none.
	Unsubscribe string `json:"-"`
	// Channels, when set, is the create's fallback list (channels): the
	// channels in order of preference, of which the API makes the first
	// the recipient has and allows the notification's Channel and the
	// later ones its hops (NewNotification.Fallback). Not stored as
	// such.
	Channels []string `json:"-"`
}

// Timed reports whether r has a send_at or an expires_at.
func (r CreateRequest) Timed() bool { return r.SendAt != nil || r.ExpiresAt != nil }

// Validate checks a request against the contract: the checks every
// channel shares (user_id, a known channel), then the channel's own (to,
// subject, body). It returns a *FieldError naming the first offending
// field, or nil.
func (r CreateRequest) Validate(channels Channels) error {
	if err := checkText("user_id", r.UserID, MaxUserIDLen, false); err != nil {
		return err
	}
	if r.Channel == "" {
		return &FieldError{Field: "channel", Message: "is required"}
	}
	ch, ok := channels[r.Channel]
	if !ok || ch.Validate == nil {
		return &FieldError{Field: "channel", Message: channels.MustBe()}
	}
	if !r.Priority.Valid() {
		return &FieldError{Field: "priority", Message: "must be one of high, normal, bulk"}
	}
	if !ch.Subject && r.Subject != "" {
		return &FieldError{Field: "subject", Message: "must be absent: the " + r.Channel + " channel has no subject"}
	}
	return ch.Validate(r)
}

// ValidateEmail is the email channel's validator: to is one RFC 5322
// address, subject a line of text, body text.
func ValidateEmail(r CreateRequest) error {
	if err := checkText("to", r.To, MaxToLen, false); err != nil {
		return err
	}
	addr, err := ParseAddress(r.To)
	if err != nil {
		return &FieldError{Field: "to", Message: "must be a single email address"}
	}
	if _, _, err := SMTPAddress(addr); err != nil {
		return &FieldError{Field: "to", Message: "has a domain that is not a valid internationalized domain name"}
	}
	if err := checkText("subject", r.Subject, MaxSubjectLen, false); err != nil {
		return err
	}
	return CheckBody(r.Body)
}

// CheckBody is the body check every channel shares: non-empty, valid
// UTF-8, at most MaxBodyLen bytes, no control characters but line breaks
// and tabs.
func CheckBody(body string) error { return checkText("body", body, MaxBodyLen, true) }

// CheckText is the check of a one-line text field: non-empty, valid UTF-8,
// at most max bytes, no control character but tab.
func CheckText(field, v string, max int) error { return checkText(field, v, max, false) }

// ParseAddress parses a single RFC 5322 address ("a@example.com" or
// "Name <a@example.com>") and returns the bare address.
func ParseAddress(s string) (string, error) {
	a, err := mail.ParseAddress(s)
	if err != nil {
		return "", err
	}
	if strings.ContainsAny(a.Address, "\r\n") {
		return "", &FieldError{Field: "to", Message: "contains a line break"}
	}
	return a.Address, nil
}

// checkText requires a non-empty, valid UTF-8 value of at most max bytes.
// Only a multi-line field (the body) may hold control characters other than
// tab, and then only line breaks.
func checkText(field, v string, max int, multiline bool) error {
	switch {
	case strings.TrimSpace(v) == "":
		return &FieldError{Field: field, Message: "is required"}
	case len(v) > max:
		return &FieldError{Field: field, Message: "is too long"}
	case !utf8.ValidString(v):
		return &FieldError{Field: field, Message: "is not valid UTF-8"}
	}
	for _, c := range v {
		if c == '\t' || (multiline && (c == '\r' || c == '\n')) {
			continue
		}
		if c == '\r' || c == '\n' {
			return &FieldError{Field: field, Message: "must not contain line breaks"}
		}
		if unicode.IsControl(c) {
			return &FieldError{Field: field, Message: "must not contain control characters"}
		}
	}
	return nil
}
