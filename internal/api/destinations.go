package api

import (
	"context"
	"net/http"
	"net/url"

	"github.com/heraldhq/herald/internal/notify"
)

// Destinations lists the records of the destinations that are not up and
// enables a destination. The stores implement it.
type Destinations interface {
	// ListDestinations returns the page of records f selects, by key,
	// each with the number of its pending notifications.
	ListDestinations(ctx context.Context, f notify.DestinationFilter) (notify.DestinationPage, error)
	// EnableDestination removes key's record (disabled or failing), or
	// fails with notify.ErrNotFound when there is none.
	EnableDestination(ctx context.Context, key string) error
}

// destinationView is a destination as GET /destinations shows it.
type destinationView struct {
	Key     string `json:"key"`
	Channel string `json:"channel"`
	State   string `json:"state"`
	Reason  string `json:"reason"`
	Since   string `json:"since"`
	Pending int64  `json:"pending"`
}

// destinationParams are the query parameters of GET /destinations.
var destinationParams = map[string]bool{"state": true, "limit": true, "cursor": true}

// ParseDestinationFilter reads the query of GET /destinations (state,
// limit, cursor) with the API's rules; `herald destinations list` passes
// its flags through it. Its error is a *ParamError naming the parameter.
func ParseDestinationFilter(q url.Values) (notify.DestinationFilter, error) {
	f, e := parseDestinationQuery(q)
	if e != nil {
		return f, &ParamError{Field: e.Field, Message: e.Message}
	}
	return f, nil
}

func parseDestinationQuery(q url.Values) (notify.DestinationFilter, *apiError) {
	f := notify.DestinationFilter{Limit: DefaultListLimit}
	if e := checkParams(q, destinationParams); e != nil {
		return f, e
	}
	if v, ok := one(q, "state"); ok {
		switch v {
		case notify.DestinationFailing, notify.DestinationDisabled:
			f.State = v
		default:
			return f, invalidParam("state", "must be failing or disabled (a destination with no record is up, and not listed)")
		}
	}
	var e *apiError
	if f.Limit, e = parseLimit(q); e != nil {
		return f, e
	}
	if v, ok := one(q, "cursor"); ok {
		after, err := f.DecodeCursor(v)
		if e := cursorError(err); e != nil {
			return f, e
		}
		f.After = after
	}
	return f, nil
}

// NewDestinationList is the JSON shape of a page of the destinations
// listing, shared by the API and `herald destinations list --json`; f is
// the listing's filter, to which the next cursor is bound.
func NewDestinationList(f notify.DestinationFilter, p notify.DestinationPage) any {
	next := ""
	if p.Next != "" {
		next = f.EncodeCursor(p.Next)
	}
	return newPage(p.Items, newDestinationView, next)
}

func newDestinationView(d notify.Destination) destinationView {
	return destinationView{
		Key: d.Key, Channel: d.Channel, State: d.State, Reason: d.Reason,
		Since: formatTime(d.Since), Pending: d.Pending,
	}
}

// enabledView is the reply of POST /destinations/{key}/enable.
type enabledView struct {
	Key   string `json:"key"`
	State string `json:"state"`
}

// NewEnabled is the JSON shape of an enabled destination, shared by the
// API and `herald destinations enable --json`.
func NewEnabled(key string) any { return enabledView{Key: key, State: notify.DestinationUp} }

func (a *API) listDestinations(w http.ResponseWriter, r *http.Request) {
	f, e := parseDestinationQuery(r.URL.Query())
	if e != nil {
		writeError(w, http.StatusBadRequest, *e)
		return
	}
	p, err := a.cfg.Destinations.ListDestinations(r.Context(), f)
	if err != nil {
		a.unavailable(w, r, "list destinations", err)
		return
	}
	writeJSON(w, http.StatusOK, NewDestinationList(f, p))
}

// errNoDestination answers POST /destinations/{key}/enable for a key with
// no record.
var errNoDestination = apiError{Code: "not_found", Message: "no such destination: it has no failing or disabled record (a destination without one is up)"}

func (a *API) enableDestination(w http.ResponseWriter, r *http.Request) {
	if e := checkParams(r.URL.Query(), nil); e != nil {
		writeError(w, http.StatusBadRequest, *e)
		return
	}
	key := r.PathValue("key")
	err := a.cfg.Destinations.EnableDestination(r.Context(), key)
	if a.storeFailed(w, r, "enable destination", err, errNoDestination) {
		return
	}
	writeJSON(w, http.StatusOK, NewEnabled(key))
}
