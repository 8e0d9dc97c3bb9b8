package api

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/heraldhq/herald/internal/notify"
)

// The page size of GET /notifications. A limit above MaxListLimit is refused
// with a 400 naming "limit", not clamped: a client that asked for 1000 and
// silently got 500 could take the short page for the end of the data.
const (
	DefaultListLimit = 50
	MaxListLimit     = 500
)

// listParams are the query parameters of GET /notifications.
var listParams = map[string]bool{
	"user_id": true, "status": true, "channel": true, "created_after": true, "created_before": true, "limit": true, "cursor": true,
}

// parseListQuery reads the query of GET /notifications into a filter, the
// resumed position included. Its error is the 400 to answer, naming the
// parameter at fault: an unknown or repeated parameter, a value of the wrong
// type or out of range, an unknown status, an empty time window, a cursor
// that herald did not issue or that belongs to other filters, a channel
// not among channels.
func parseListQuery(q url.Values, channels notify.Channels) (notify.ListFilter, *apiError) {
	f := notify.ListFilter{Limit: DefaultListLimit}
	if e := checkParams(q, listParams); e != nil {
		return f, e
	}
	if v, ok := one(q, "user_id"); ok {
		if e := checkQueryText("user_id", v, notify.MaxUserIDLen); e != nil {
			return f, e
		}
		f.UserID = v
	}
	if v, ok := one(q, "status"); ok {
		switch s := notify.Status(v); s {
		case notify.StatusPending, notify.StatusScheduled, notify.StatusSent, notify.StatusFailed,
			notify.StatusCanceled, notify.StatusExpired, notify.StatusSuppressed:
			f.Status = s
		default:
			return f, invalidParam("status", "must be pending, scheduled, sent, failed, canceled, expired or suppressed")
		}
	}
	if v, ok := one(q, "channel"); ok {
		if _, known := channels[v]; !known {
			return f, invalidParam("channel", "must be one of "+strings.Join(channels.Names(), ", "))
		}
		f.Channel = v
	}
	for _, p := range []struct {
		name string
		to   *time.Time
	}{{"created_after", &f.CreatedAfter}, {"created_before", &f.CreatedBefore}} {
		v, ok := one(q, p.name)
		if !ok {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return f, invalidParam(p.name, "must be an RFC 3339 time such as 2026-05-01T12:00:00Z")
		}
		*p.to = t
	}
	if !f.CreatedAfter.IsZero() && !f.CreatedBefore.IsZero() && !f.CreatedBefore.After(f.CreatedAfter) {
		return f, invalidParam("created_before", "must be later than created_after")
	}
	var e *apiError
	if f.Limit, e = parseLimit(q); e != nil {
		return f, e
	}
	if v, ok := one(q, "cursor"); ok {
		p, err := f.DecodeCursor(v)
		if e := cursorError(err); e != nil {
			return f, e
		}
		f.After = &p
	}
	return f, nil
}

// parseLimit reads the limit parameter of a paged listing: DefaultListLimit
// when absent.
func parseLimit(q url.Values) (int, *apiError) {
	v, ok := one(q, "limit")
	if !ok {
		return DefaultListLimit, nil
	}
	n, ok := notify.ParseID(v) // digits only: no sign, no space, no exponent
	if !ok || n > MaxListLimit {
		return 0, invalidParam("limit", "must be an integer from 1 to "+strconv.Itoa(MaxListLimit))
	}
	return int(n), nil
}

// cursorError is the 400 for a cursor that a listing's decoder refused
// (nil for none).
func cursorError(err error) *apiError {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, notify.ErrForeignCursor):
		return &apiError{Code: "invalid_cursor", Message: "the cursor belongs to a listing with other filters; list again without it", Field: "cursor"}
	default:
		return &apiError{Code: "invalid_cursor", Message: "the cursor is not one this API issued; pass next_cursor as it was given", Field: "cursor"}
	}
}

// ParamError is a query parameter (or the flag that stands for it) that a
// listing refuses.
type ParamError struct {
	// Field names the parameter: user_id, status, channel, created_after,
	// created_before, limit or cursor.
	Field   string
	Message string
}

// Error returns the message, which names the parameter.
func (e *ParamError) Error() string { return e.Message }

// Param names the parameter (the console reads it without importing the
// API).
func (e *ParamError) Param() string { return e.Field }

// ParseListFilter reads the filters of a listing given as GET
// /notifications query parameters, with the API's rules (see the OpenAPI
// document); `herald notifications list` passes its flags through it, so
// that both refuse the same input the same way. channels are the channels
// a channel filter may name. Its error is a *ParamError.
func ParseListFilter(q url.Values, channels notify.Channels) (notify.ListFilter, error) {
	f, e := parseListQuery(q, channels)
	if e != nil {
		return f, &ParamError{Field: e.Field, Message: e.Message}
	}
	return f, nil
}

// one returns the value of a parameter given once (parseListQuery refuses
// repeats first).
func one(q url.Values, name string) (string, bool) {
	vs := q[name]
	if len(vs) == 0 {
		return "", false
	}
	return vs[0], true
}

func invalidParam(name, msg string) *apiError {
	return &apiError{Code: "invalid_field", Message: name + " " + msg, Field: name}
}

// checkQueryText accepts what a create would have stored: non-empty valid
// UTF-8 without control characters, at most max bytes. Anything else can
// match nothing, and would make PostgreSQL fail (a NUL byte, invalid
// UTF-8) instead of answering an empty page.
func checkQueryText(name, v string, max int) *apiError {
	switch {
	case v == "":
		return invalidParam(name, "must not be empty")
	case len(v) > max:
		return invalidParam(name, "must be at most "+strconv.Itoa(max)+" bytes")
	case !utf8.ValidString(v):
		return invalidParam(name, "must be valid UTF-8")
	}
	for _, c := range v {
		if unicode.IsControl(c) {
			return invalidParam(name, "must not contain control characters")
		}
	}
	return nil
}

// NewPageView is the JSON shape of a page of notifications, shared by the
// API and `herald notifications list --json`; f is the listing's filter, to
// which the next cursor is bound.
func NewPageView(f notify.ListFilter, p notify.ListPage) any {
	next := ""
	if p.Next != nil {
		next = f.EncodeCursor(*p.Next)
	}
	return newPage(p.Items, newNotificationView, next)
}

// list handles GET /notifications.
func (a *API) list(w http.ResponseWriter, r *http.Request) {
	f, e := parseListQuery(r.URL.Query(), a.cfg.Channels)
	if e != nil {
		writeError(w, http.StatusBadRequest, *e)
		return
	}
	page, err := a.store.List(r.Context(), f)
	if err != nil {
		a.unavailable(w, r, "list notifications", err)
		return
	}
	writeJSON(w, http.StatusOK, NewPageView(f, page))
}

// attemptView is one delivery attempt as the API shows it.
type attemptView struct {
	Attempt    int     `json:"attempt"`
	MessageID  string  `json:"message_id"`
	StartedAt  string  `json:"started_at"`
	FinishedAt *string `json:"finished_at"`
	Outcome    *string `json:"outcome"`
	Error      *string `json:"error"`
	// Repeats counts the deferrals of the same kind folded into this one
	// (one row per outage, not one per probe); LastAt is when the latest
	// finished (null when Repeats is 0).
	Repeats int     `json:"repeats"`
	LastAt  *string `json:"last_at"`
}

// NewAttemptViews is the JSON shape of a notification's attempts, oldest
// first (an array), shared by the API and `herald notifications show
// --json`.
func NewAttemptViews(as []notify.Attempt) any { return viewsOf(as, newAttemptView) }

func newAttemptView(at notify.Attempt) attemptView {
	v := attemptView{Attempt: at.Attempt, MessageID: notify.FormatID(at.MessageID), StartedAt: formatTime(at.StartedAt),
		FinishedAt: formatTimePtr(at.FinishedAt), Outcome: nullIfEmpty(at.Outcome), Error: nullIfEmpty(at.Error)}
	if at.Repeats > 0 && at.LastAt != nil {
		s := formatTime(*at.LastAt)
		v.Repeats, v.LastAt = at.Repeats, &s
	}
	return v
}

// attemptParams are the query parameters of GET
// /notifications/{id}/attempts.
var attemptParams = map[string]bool{"limit": true, "cursor": true}

// ParseAttemptFilter reads the query of GET /notifications/{id}/attempts
// (limit, cursor) for notification id, with the API's rules. Its error is
// a *ParamError naming the parameter.
func ParseAttemptFilter(q url.Values, id int64) (notify.AttemptFilter, error) {
	f, e := parseAttemptQuery(q, id)
	if e != nil {
		return f, &ParamError{Field: e.Field, Message: e.Message}
	}
	return f, nil
}

func parseAttemptQuery(q url.Values, id int64) (notify.AttemptFilter, *apiError) {
	f := notify.AttemptFilter{Limit: DefaultListLimit}
	if e := checkParams(q, attemptParams); e != nil {
		return f, e
	}
	var e *apiError
	if f.Limit, e = parseLimit(q); e != nil {
		return f, e
	}
	if v, ok := one(q, "cursor"); ok {
		after, err := f.DecodeAttemptCursor(id, v)
		if e := cursorError(err); e != nil {
			return f, e
		}
		f.After = after
	}
	return f, nil
}

// NewAttemptPage is the JSON shape of a page of a notification's
// attempts, shared by the API and the command line; f is the listing's
// filter, to which the next cursor is bound.
func NewAttemptPage(id int64, f notify.AttemptFilter, p notify.AttemptPage) any {
	next := ""
	if p.Next != 0 {
		next = f.EncodeAttemptCursor(id, p.Next)
	}
	return newPage(p.Items, newAttemptView, next)
}

// attempts handles GET /notifications/{id}/attempts: a page of the
// attempts, oldest first.
func (a *API) attempts(w http.ResponseWriter, r *http.Request) {
	id, ok := notificationID(w, r)
	if !ok {
		return
	}
	f, e := parseAttemptQuery(r.URL.Query(), id)
	if e != nil {
		writeError(w, http.StatusBadRequest, *e)
		return
	}
	p, err := a.store.AttemptPage(r.Context(), id, f)
	if a.storeFailed(w, r, "read attempts", err, noSuchNotification) {
		return
	}
	writeJSON(w, http.StatusOK, NewAttemptPage(id, f, p))
}
