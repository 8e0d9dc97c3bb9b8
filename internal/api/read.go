package api

import (
	"errors"
	"net/http"

	"github.com/heraldhq/herald/internal/notify"
)

// get handles GET /notifications/{id}. A malformed id is simply not found:
// telling "malformed" from "absent" would help nobody.
func (a *API) get(w http.ResponseWriter, r *http.Request) {
	notFound := apiError{Code: "not_found", Message: "no such notification"}
	id, ok := notify.ParseID(r.PathValue("id"))
	if !ok {
		writeError(w, http.StatusNotFound, notFound)
		return
	}
	n, err := a.store.Get(r.Context(), id)
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, NewNotificationDetail(n))
	case errors.Is(err, notify.ErrNotFound):
		writeError(w, http.StatusNotFound, notFound)
	default:
		a.unavailable(w, r, "get notification", err)
	}
}

// healthz handles GET /healthz: the process is alive and serving.
func (a *API) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz handles GET /readyz (see Ready).
func (a *API) readyz(w http.ResponseWriter, r *http.Request) {
	Ready(a.cfg.Ready, a.log).ServeHTTP(w, r)
}
