package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/heraldhq/herald/internal/notify"
)

// The page size of GET /dead-letters, as for GET /notifications: above the
// maximum is refused (400), not clamped. A redrive's limit is a selection,
// not a page, and goes up to MaxRedriveLimit.
const (
	DefaultDeadLetterLimit = 100
	MaxDeadLetterLimit     = MaxListLimit
	MaxRedriveLimit        = 10000
)

// maxErrorFilterLen bounds the error filter's text.
const maxErrorFilterLen = 1000

type deadLetterView struct {
	ID        string  `json:"id"`
	To        string  `json:"to"`
	Attempts  int     `json:"attempts"`
	LastError *string `json:"last_error"`
	FailedAt  *string `json:"failed_at"`
}

func newDeadLetterView(n notify.Notification) deadLetterView {
	return deadLetterView{ID: notify.FormatID(n.ID), To: n.To, Attempts: n.Attempts,
		LastError: nullIfEmpty(n.LastError), FailedAt: formatTimePtr(n.FailedAt)}
}

// DeadLetterQuery is a parsed GET /dead-letters query: the filter of one
// page, and what its next cursor is bound to.
type DeadLetterQuery struct {
	// Filter selects the page; its Limit is the page size and After the
	// position the cursor resumes from.
	Filter notify.DeadLetterFilter
	// filters are since and error as the cursor is bound to them.
	filters []string
}

// dlParams are the query parameters of GET /dead-letters.
var dlParams = map[string]bool{"since": true, "error": true, "limit": true, "cursor": true}

// ParseDeadLetterQuery reads the query of GET /dead-letters with the API's
// rules (those of GET /notifications: unknown or repeated parameters, wrong
// types and foreign cursors are refused, naming the parameter); `herald dlq
// list` passes its flags through it. Its error is a *ParamError.
func ParseDeadLetterQuery(q url.Values) (DeadLetterQuery, error) {
	dq, e := parseDeadLetterQuery(q)
	if e != nil {
		return dq, &ParamError{Field: e.Field, Message: e.Message}
	}
	return dq, nil
}

func parseDeadLetterQuery(q url.Values) (DeadLetterQuery, *apiError) {
	var dq DeadLetterQuery
	if e := checkParams(q, dlParams); e != nil {
		return dq, e
	}
	since, _ := one(q, "since")
	errText, hasErr := one(q, "error")
	if hasErr {
		if e := checkQueryText("error", errText, maxErrorFilterLen); e != nil {
			return dq, e
		}
	}
	limit, _ := one(q, "limit")
	f, e := deadLetterFilter(since, errText, limit, MaxDeadLetterLimit)
	if e != nil {
		return dq, e
	}
	if f.Limit == 0 {
		f.Limit = DefaultDeadLetterLimit
	}
	// since is bound as the duration it names, not the instant it stands
	// for at each page: "24h" and "1440m" are one listing.
	if !f.Since.IsZero() {
		d, _ := time.ParseDuration(since)
		since = d.String()
	}
	dq.filters = []string{since, errText}
	if v, ok := one(q, "cursor"); ok {
		p, err := notify.DecodeDeadLetterCursor(dq.filters, v)
		switch {
		case errors.Is(err, notify.ErrForeignCursor):
			return dq, &apiError{Code: "invalid_cursor", Message: "the cursor belongs to a listing with other filters; list again without it", Field: "cursor"}
		case err != nil:
			return dq, &apiError{Code: "invalid_cursor", Message: "the cursor is not one this API issued; pass next_cursor as it was given", Field: "cursor"}
		}
		f.After = &p
	}
	dq.Filter = f
	return dq, nil
}

// checkParams refuses a parameter not in known, and one given twice.
func checkParams(q url.Values, known map[string]bool) *apiError {
	for name, vs := range q {
		if name == "" {
			continue // "?=x" names nothing, like a stray "&"
		}
		if !known[name] {
			name = strings.ToValidUTF8(clip(name, maxEchoLen), "\uFFFD")
			return &apiError{Code: "unknown_field", Message: "unknown query parameter " + strconv.Quote(name), Field: name}
		}
		if len(vs) != 1 {
			return invalidParam(name, "is given more than once")
		}
	}
	return nil
}

// Page cuts a page from the dead letters the store returned for the filter
// with a limit of one more than the page size: the items, and the cursor of
// the next page when there is one.
func (dq DeadLetterQuery) Page(ns []notify.Notification) ([]notify.Notification, string) {
	if len(ns) <= dq.Filter.Limit {
		return ns, ""
	}
	ns = ns[:dq.Filter.Limit]
	last := ns[len(ns)-1]
	if last.FailedAt == nil {
		return ns, "" // a row without failed_at has no place to resume from
	}
	return ns, notify.EncodeDeadLetterCursor(dq.filters, notify.DeadLetterPosition{FailedAt: *last.FailedAt, ID: last.ID})
}

// NewDeadLetterPage is the JSON shape of a page of dead letters, shared by
// the API and `herald dlq list --json`.
func NewDeadLetterPage(ns []notify.Notification, next string) any {
	return newPage(ns, newDeadLetterView, next)
}

func (a *API) listDeadLetters(w http.ResponseWriter, r *http.Request) {
	dq, e := parseDeadLetterQuery(r.URL.Query())
	if e != nil {
		writeError(w, http.StatusBadRequest, *e)
		return
	}
	f := dq.Filter
	f.Limit++ // one more tells whether there is a next page
	ns, err := a.cfg.DeadLetters.List(r.Context(), f)
	if err != nil {
		a.unavailable(w, r, "list dead letters", err)
		return
	}
	writeJSON(w, http.StatusOK, NewDeadLetterPage(dq.Page(ns)))
}

// redriveFields are the keys a redrive body may hold, spelled exactly.
var redriveFields = map[string]bool{"ids": true, "all": true, "since": true, "error": true, "limit": true, "dry_run": true}

type redriveRequest struct {
	IDs    []string `json:"ids"`
	All    bool     `json:"all"`
	Since  string   `json:"since"`
	Error  string   `json:"error"`
	Limit  *int     `json:"limit"`
	DryRun bool     `json:"dry_run"`
}

type redriveView struct {
	Selected         int           `json:"selected"`
	Redriven         []string      `json:"redriven"`
	Skipped          []skippedView `json:"skipped"`
	RemovedFromQueue int           `json:"removed_from_queue"`
	DryRun           bool          `json:"dry_run"`
}

type skippedView struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

func (a *API) redrive(w http.ResponseWriter, r *http.Request) {
	if e := checkContentType(r.Header.Values("Content-Type")); e != nil {
		writeError(w, http.StatusUnsupportedMediaType, *e)
		return
	}
	// The selection is the body; a query parameter would be ignored in
	// silence, so none is taken.
	if e := checkParams(r.URL.Query(), nil); e != nil {
		writeError(w, http.StatusBadRequest, *e)
		return
	}
	sel, ids, e, status := a.readRedrive(w, r)
	if e != nil {
		writeError(w, status, *e)
		return
	}
	res, err := a.cfg.DeadLetters.Redrive(r.Context(), sel)
	if err != nil {
		a.unavailable(w, r, "redrive", err)
		return
	}
	skips, err := notify.ExplainSkips(r.Context(), a.store.Get, ids, res)
	if err != nil {
		a.unavailable(w, r, "redrive", err)
		return
	}
	v := redriveView{
		Selected: res.Selected, Redriven: viewsOf(res.Redriven, notify.FormatID), Skipped: []skippedView{},
		RemovedFromQueue: res.RemovedFromQueue, DryRun: res.DryRun,
	}
	for _, s := range skips {
		v.Skipped = append(v.Skipped, skippedView{ID: notify.FormatID(s.ID), Reason: s.Reason})
	}
	writeJSON(w, http.StatusOK, v)
}

// readRedrive reads a redrive body as strictly as a create's: valid UTF-8,
// one object of known keys spelled exactly and given once, each of its type
// (ids are id strings, as the API writes them), a field named on every
// error. On failure it returns the error to answer and its status.
func (a *API) readRedrive(w http.ResponseWriter, r *http.Request) (notify.RedriveSelection, []int64, *apiError, int) {
	var sel notify.RedriveSelection
	raw, e, status := readBody(w, r, a.cfg.MaxBodyBytes, "")
	if e != nil {
		return sel, nil, e, status
	}
	bad := func(e *apiError) (notify.RedriveSelection, []int64, *apiError, int) {
		return sel, nil, e, http.StatusBadRequest
	}
	if !utf8.Valid(raw) {
		return bad(&apiError{Code: "invalid_utf8", Message: "the request body is not valid UTF-8"})
	}
	if e := scanKeys(raw, redriveFields); e != nil {
		return bad(e)
	}
	var req redriveRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
			return bad(&apiError{Code: "invalid_field", Message: te.Field + " must be " + redriveTypes[te.Field], Field: te.Field})
		}
		return bad(&apiError{Code: "invalid_json", Message: "the request body is not a valid JSON object"})
	}
	limit := ""
	if req.Limit != nil {
		limit = strconv.Itoa(*req.Limit)
	}
	if req.Error != "" {
		if e := checkQueryText("error", req.Error, maxErrorFilterLen); e != nil {
			return bad(e)
		}
	}
	f, e := deadLetterFilter(req.Since, req.Error, limit, MaxRedriveLimit)
	if e != nil {
		return bad(e)
	}
	for _, s := range req.IDs {
		id, ok := notify.ParseID(s)
		if !ok {
			return bad(&apiError{Code: "invalid_field", Message: "ids must be " + redriveTypes["ids"], Field: "ids"})
		}
		f.IDs = append(f.IDs, id)
	}
	if req.All && len(f.IDs) > 0 {
		return bad(&apiError{Code: "invalid_field", Message: "all and ids are exclusive: name ids, or all", Field: "all"})
	}
	sel = notify.RedriveSelection{Filter: f, All: req.All, DryRun: req.DryRun}
	if sel.Empty() {
		return bad(&apiError{Code: "empty_selection", Message: "name ids, all, or a filter (since, error, limit)"})
	}
	return sel, f.IDs, nil, 0
}

// redriveTypes say what each field of a redrive body must be.
var redriveTypes = map[string]string{
	"ids":     "an array of notification ids, as strings ([\"17\"])",
	"all":     "a boolean",
	"since":   "a duration string like \"24h\"",
	"error":   "a string",
	"limit":   "an integer from 1 to " + strconv.Itoa(MaxRedriveLimit),
	"dry_run": "a boolean",
}

// deadLetterFilter parses the filters shared by the listing and the
// redrive; a limit is an integer from 1 to max.
func deadLetterFilter(since, errText, limit string, max int) (notify.DeadLetterFilter, *apiError) {
	var f notify.DeadLetterFilter
	if since != "" {
		d, err := time.ParseDuration(since)
		if err != nil || d <= 0 {
			return f, &apiError{Code: "invalid_field", Message: "since must be a positive duration like 24h", Field: "since"}
		}
		f.Since = time.Now().Add(-d)
	}
	f.ErrorContains = errText
	if limit != "" {
		n, ok := notify.ParseID(limit) // digits only: no sign, no space, no exponent
		if !ok || n > int64(max) {
			return f, invalidParam("limit", "must be an integer from 1 to "+strconv.Itoa(max))
		}
		f.Limit = int(n)
	}
	return f, nil
}
