package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/heraldhq/herald/internal/notify"
)

// Destinations lists the records of the destinations that are not up and
// enables a destination. The stores implement it.
type Destinations interface {
	// ListDestinations returns every record, each with the number of its
	// pending notifications.
	ListDestinations(ctx context.Context) ([]notify.Destination, error)
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

// destinationList is the reply of GET /destinations.
type destinationList struct {
	Items []destinationView `json:"items"`
}

// NewDestinationList is the JSON shape of the destinations listing, shared
// by the API and `herald destinations list --json`.
func NewDestinationList(ds []notify.Destination) any {
	v := destinationList{Items: make([]destinationView, 0, len(ds))}
	for _, d := range ds {
		v.Items = append(v.Items, destinationView{
			Key: d.Key, Channel: d.Channel, State: d.State, Reason: d.Reason,
			Since: formatTime(d.Since), Pending: d.Pending,
		})
	}
	return v
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
	if e := checkParams(r.URL.Query(), nil); e != nil {
		writeError(w, http.StatusBadRequest, *e)
		return
	}
	ds, err := a.cfg.Destinations.ListDestinations(r.Context())
	if err != nil {
		a.unavailable(w, r, "list destinations", err)
		return
	}
	writeJSON(w, http.StatusOK, NewDestinationList(ds))
}

func (a *API) enableDestination(w http.ResponseWriter, r *http.Request) {
	if e := checkParams(r.URL.Query(), nil); e != nil {
		writeError(w, http.StatusBadRequest, *e)
		return
	}
	key := r.PathValue("key")
	err := a.cfg.Destinations.EnableDestination(r.Context(), key)
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, NewEnabled(key))
	case errors.Is(err, notify.ErrNotFound):
		writeError(w, http.StatusNotFound, apiError{Code: "not_found", Message: "no such destination: it has no failing or disabled record (a destination without one is up)"})
	default:
		a.unavailable(w, r, "enable destination", err)
	}
}
