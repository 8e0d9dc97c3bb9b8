package api

import (
	"net/http"

	"github.com/heraldhq/herald/internal/notify"
)

// noSuchNotification answers a notification's route for an id that names
// none.
var noSuchNotification = apiError{Code: "not_found", Message: "no such notification"}

// notificationID returns the notification id of r's path. A malformed id is
// simply not found, as an unknown one is: it answers 404 and reports false.
// Telling "malformed" from "absent" would help nobody.
func notificationID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, ok := notify.ParseID(r.PathValue("id"))
	if !ok {
		writeError(w, http.StatusNotFound, noSuchNotification)
	}
	return id, ok
}

// get handles GET /notifications/{id}; a malformed id is not found (see
// notificationID).
func (a *API) get(w http.ResponseWriter, r *http.Request) {
	id, ok := notificationID(w, r)
	if !ok {
		return
	}
	n, err := a.store.Get(r.Context(), id)
	if a.storeFailed(w, r, "get notification", err, noSuchNotification) {
		return
	}
	writeJSON(w, http.StatusOK, NewNotificationDetail(n))
}

// healthz handles GET /healthz: the process is alive and serving.
func (a *API) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz handles GET /readyz (see Ready).
func (a *API) readyz(w http.ResponseWriter, r *http.Request) {
	Ready(a.cfg.Ready, a.log).ServeHTTP(w, r)
}
