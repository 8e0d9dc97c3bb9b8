package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// DeadLetters inspects and redrives dead letters.
type DeadLetters interface {
	List(ctx context.Context, f notify.DeadLetterFilter) ([]notify.Notification, error)
	Redrive(ctx context.Context, sel notify.RedriveSelection) (notify.RedriveResult, error)
}

const (
	routeDeadLetters = "GET /dead-letters"
	routeRedrive     = "POST /dead-letters/redrive"
	// defaultDeadLetterLimit caps a listing that names no limit.
	defaultDeadLetterLimit = 100
	maxDeadLetterLimit     = 10000
)

type deadLetterView struct {
	ID        string  `json:"id"`
	To        string  `json:"to"`
	Attempts  int     `json:"attempts"`
	LastError *string `json:"last_error"`
	FailedAt  *string `json:"failed_at"`
}

// NewDeadLetterView is the JSON shape of one dead letter, shared by the API
// and `herald dlq list --json`.
func NewDeadLetterView(n notify.Notification) any {
	v := deadLetterView{ID: notify.FormatID(n.ID), To: n.To, Attempts: n.Attempts}
	if n.LastError != "" {
		v.LastError = &n.LastError
	}
	if n.FailedAt != nil {
		s := formatTime(*n.FailedAt)
		v.FailedAt = &s
	}
	return v
}

func (a *API) listDeadLetters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, e := deadLetterFilter(q.Get("since"), q.Get("error"), q.Get("limit"))
	if e != nil {
		writeError(w, http.StatusBadRequest, *e)
		return
	}
	if f.Limit == 0 {
		f.Limit = defaultDeadLetterLimit
	}
	ns, err := a.cfg.DeadLetters.List(r.Context(), f)
	if err != nil {
		a.unavailable(w, r, "list dead letters", err)
		return
	}
	out := make([]any, 0, len(ns))
	for _, n := range ns {
		out = append(out, NewDeadLetterView(n))
	}
	writeJSON(w, http.StatusOK, out)
}

type redriveRequest struct {
	IDs    []json.Number `json:"ids"`
	All    bool          `json:"all"`
	Since  string        `json:"since"`
	Error  string        `json:"error"`
	Limit  json.Number   `json:"limit"`
	DryRun bool          `json:"dry_run"`
}

type redriveView struct {
	Selected         int      `json:"selected"`
	Redriven         []string `json:"redriven"`
	Skipped          []string `json:"skipped"`
	RemovedFromQueue int      `json:"removed_from_queue"`
	DryRun           bool     `json:"dry_run"`
}

func (a *API) redrive(w http.ResponseWriter, r *http.Request) {
	if e := checkContentType(r.Header.Values("Content-Type")); e != nil {
		writeError(w, http.StatusUnsupportedMediaType, *e)
		return
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.cfg.MaxBodyBytes))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, apiError{Code: "too_large", Message: "the request body is too large"})
		return
	}
	var req redriveRequest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&req); err != nil || dec.More() {
		writeError(w, http.StatusBadRequest, apiError{Code: "invalid_json", Message: "the body must be one JSON object with ids, all, since, error, limit, dry_run"})
		return
	}
	f, e := deadLetterFilter(req.Since, req.Error, req.Limit.String())
	if e != nil {
		writeError(w, http.StatusBadRequest, *e)
		return
	}
	for _, s := range req.IDs {
		id, ok := notify.ParseID(s.String())
		if !ok {
			writeError(w, http.StatusBadRequest, apiError{Code: "invalid_field", Message: "ids must be notification ids", Field: "ids"})
			return
		}
		f.IDs = append(f.IDs, id)
	}
	sel := notify.RedriveSelection{Filter: f, All: req.All, DryRun: req.DryRun}
	if sel.Empty() {
		writeError(w, http.StatusBadRequest, apiError{Code: "empty_selection", Message: "name ids, all, or a filter (since, error, limit)"})
		return
	}
	res, err := a.cfg.DeadLetters.Redrive(r.Context(), sel)
	if err != nil {
		a.unavailable(w, r, "redrive", err)
		return
	}
	writeJSON(w, http.StatusOK, redriveView{
		Selected: res.Selected, Redriven: formatIDs(res.Redriven), Skipped: formatIDs(res.Skipped),
		RemovedFromQueue: res.RemovedFromQueue, DryRun: res.DryRun,
	})
}

func formatIDs(ids []int64) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		out = append(out, notify.FormatID(id))
	}
	return out
}

// deadLetterFilter parses the filters shared by the listing and the redrive.
func deadLetterFilter(since, errText, limit string) (notify.DeadLetterFilter, *apiError) {
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
		n, err := strconv.Atoi(limit)
		if err != nil || n < 1 || n > maxDeadLetterLimit {
			return f, &apiError{Code: "invalid_field", Message: "limit must be an integer from 1 to " + strconv.Itoa(maxDeadLetterLimit), Field: "limit"}
		}
		f.Limit = n
	}
	return f, nil
}
