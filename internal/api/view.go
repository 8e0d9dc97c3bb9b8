package api

import (
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// notificationView is a notification as a create and a listing show it.
// The body is left out: it can be large, and GET /notifications/{id} (see
// notificationDetail) has it.
type notificationView struct {
	ID        string  `json:"id"`
	UserID    string  `json:"user_id"`
	Channel   string  `json:"channel"`
	To        string  `json:"to"`
	Subject   string  `json:"subject"`
	Status    string  `json:"status"`
	Attempts  int     `json:"attempts"`
	LastError *string `json:"last_error"`
	CreatedAt string  `json:"created_at"`
	UpdatedAt string  `json:"updated_at"`
	SentAt    *string `json:"sent_at"`
	FailedAt  *string `json:"failed_at"`
	// SendAt, ExpiresAt: the create's timing (issue 34); CanceledAt,
	// ExpiredAt: when it was canceled or found expired. Null when unset.
	SendAt     *string `json:"send_at"`
	ExpiresAt  *string `json:"expires_at"`
	CanceledAt *string `json:"canceled_at"`
	ExpiredAt  *string `json:"expired_at"`
	// Priority is high, normal or bulk (issue 34, point 5).
	Priority string `json:"priority"`
	// Category is the create's category (issue 35, point 3); absent when
	// it gave none.
	Category string `json:"category,omitempty"`
	// FallbackChannels lists the channels of the create's fallback list
	// still to come after this one (issue 35, point 5); FallbackOf is the
	// id of the first notification of its chain (for a hop), FallbackNext
	// the id of the hop made when this one was dead-lettered. Each absent
	// when unset.
	FallbackChannels []string `json:"fallback_channels,omitempty"`
	FallbackOf       string   `json:"fallback_of,omitempty"`
	FallbackNext     string   `json:"fallback_next,omitempty"`
}

func newNotificationView(n notify.Notification) notificationView {
	v := notificationView{
		ID:        notify.FormatID(n.ID),
		UserID:    n.UserID,
		Channel:   n.Channel,
		To:        n.To,
		Subject:   n.Subject,
		Status:    string(n.StatusAt(time.Now())),
		Attempts:  n.Attempts,
		CreatedAt: formatTime(n.CreatedAt),
		UpdatedAt: formatTime(n.UpdatedAt),
		Priority:  string(n.Priority.OrDefault()),
		Category:  n.Category,
		LastError: nullIfEmpty(n.LastError),
		SentAt:    formatTimePtr(n.SentAt),
		FailedAt:  formatTimePtr(n.FailedAt),
	}
	v.FallbackChannels = notify.HopChannels(n.Fallback)
	if n.FallbackOf != 0 {
		v.FallbackOf = notify.FormatID(n.FallbackOf)
	}
	if n.FallbackNext != 0 {
		v.FallbackNext = notify.FormatID(n.FallbackNext)
	}
	v.SendAt, v.ExpiresAt = formatTimePtr(n.SendAt), formatTimePtr(n.ExpiresAt)
	v.CanceledAt, v.ExpiredAt = formatTimePtr(n.CanceledAt), formatTimePtr(n.ExpiredAt)
	return v
}

// page is the reply of a paged listing (GET /notifications, its attempts,
// /dead-letters, /destinations): the page's items, [] when there are
// none, and the cursor of the next page, absent on the last.
type page[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// newPage is the page of items, each shown by view; next is the next
// page's cursor ("" on the last page).
func newPage[S, T any](items []S, view func(S) T, next string) page[T] {
	return page[T]{Items: viewsOf(items, view), NextCursor: next}
}

// viewsOf shows each of items with view, in order. It is never nil, so
// that a reply shows no items as [], not null.
func viewsOf[S, T any](items []S, view func(S) T) []T {
	out := make([]T, 0, len(items))
	for _, it := range items {
		out = append(out, view(it))
	}
	return out
}

// formatTimePtr is formatTime of an optional time, nil for nil.
func formatTimePtr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := formatTime(*t)
	return &s
}

// nullIfEmpty is an optional text field's value: s, or nil (JSON null)
// when it is empty.
func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// formatTime renders RFC 3339 in UTC, with the fraction the store kept.
func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// notificationDetail is a notification as GET /notifications/{id} shows it:
// with its body, its HTML part and what it was rendered from, and why it
// waits.
//
// The one-click unsubscribe URL stored with an email (its
// List-Unsubscribe header) is left out on purpose: it opts the user out
// without a login for a year, a capability meant for the recipient alone,
// and a read route hands its answers to dashboards, support tools, the
// console's pages and their logs. An operator who needs a link makes one
// with POST /recipients/{user_id}/preferences/links, a write.
type notificationDetail struct {
	notificationView
	Body string `json:"body"`
	// HTML is the email's HTML part; null when it has none.
	HTML *string `json:"html"`
	// Template, TemplateVersion and Locale say which template version and
	// locale variant rendered it; null for a notification created with
	// its content. Locale is "" for a template's default variant.
	Template        *string `json:"template"`
	TemplateVersion *int    `json:"template_version"`
	Locale          *string `json:"locale"`
	// Waiting is why a pending notification waits: its destination (or
	// its channel's provider) is failing or disabled. Null otherwise.
	Waiting *waitingView `json:"waiting"`
}

// waitingView is notify.Waiting as the API shows it.
type waitingView struct {
	Destination string `json:"destination"`
	State       string `json:"state"`
	Reason      string `json:"reason"`
	Since       string `json:"since"`
}

// NewNotificationDetail is the JSON shape of one notification with its body,
// shared by the API and `herald notifications show --json`.
func NewNotificationDetail(n notify.Notification) any {
	v := notificationDetail{notificationView: newNotificationView(n), Body: n.Body, HTML: nullIfEmpty(n.HTML)}
	if n.Template != "" {
		v.Template, v.TemplateVersion, v.Locale = &n.Template, &n.TemplateVersion, &n.Locale
	}
	if w := n.Waiting; w != nil {
		v.Waiting = &waitingView{Destination: w.Destination, State: w.State, Reason: w.Reason, Since: formatTime(w.Since)}
	}
	return v
}
