package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// Why a redrive did not redrive a notification it named or selected.
const (
	// SkipNotFound: there is no such notification.
	SkipNotFound = "not_found"
	// SkipNotFailed: the notification is pending or sent (or was sent or
	// redriven between the selection and its turn); it is never sent twice.
	SkipNotFailed = "not_failed"
	// SkipFilteredOut: the notification is failed, but the selection's
	// since, error or limit left it out.
	SkipFilteredOut = "filtered_out"
)

// Skip is a notification a redrive did not redrive, and why.
type Skip struct {
	ID     int64
	Reason string
}

// ExplainSkips says why each notification that a redrive named in ids, or
// selected, was not redriven: the ids in the order given (once each), then
// those selected but no longer failed at their turn. get reads a
// notification (the store's Get), to tell an unknown id from one that is
// not failed. Shared by the API and `herald dlq redrive`.
func ExplainSkips(ctx context.Context, get func(context.Context, int64) (notify.Notification, error), ids []int64, res notify.RedriveResult) ([]Skip, error) {
	done := map[int64]bool{}
	for _, id := range res.Redriven {
		done[id] = true
	}
	skipped := map[int64]bool{}
	for _, id := range res.Skipped {
		skipped[id] = true
	}
	var out []Skip
	for _, id := range ids {
		if done[id] {
			continue
		}
		done[id] = true
		if skipped[id] {
			out = append(out, Skip{id, SkipNotFailed})
			continue
		}
		n, err := get(ctx, id)
		switch {
		case errors.Is(err, notify.ErrNotFound):
			out = append(out, Skip{id, SkipNotFound})
		case err != nil:
			return nil, fmt.Errorf("explain skipped notification %d: %w", id, err)
		case n.Status != notify.StatusFailed:
			out = append(out, Skip{id, SkipNotFailed})
		default:
			out = append(out, Skip{id, SkipFilteredOut})
		}
	}
	for _, id := range res.Skipped {
		if !done[id] {
			done[id] = true
			out = append(out, Skip{id, SkipNotFailed})
		}
	}
	return out, nil
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
	if req.All && len(f.IDs) > 0 {
		writeError(w, http.StatusBadRequest, apiError{Code: "invalid_field", Message: "all and ids are exclusive: name ids, or all", Field: "all"})
		return
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
	skips, err := ExplainSkips(r.Context(), a.store.Get, f.IDs, res)
	if err != nil {
		a.unavailable(w, r, "redrive", err)
		return
	}
	v := redriveView{
		Selected: res.Selected, Redriven: formatIDs(res.Redriven), Skipped: []skippedView{},
		RemovedFromQueue: res.RemovedFromQueue, DryRun: res.DryRun,
	}
	for _, s := range skips {
		v.Skipped = append(v.Skipped, skippedView{ID: notify.FormatID(s.ID), Reason: s.Reason})
	}
	writeJSON(w, http.StatusOK, v)
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
