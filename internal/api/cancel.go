package api

import (
	"errors"
	"net/http"

	"github.com/heraldhq/herald/internal/notify"
)

// cancel handles POST /notifications/{id}/cancel: 200 with the canceled
// notification (again for one canceled already), 409 not_cancelable once
// it is sent, failed or expired, 409 send_in_progress while a worker
// holds its claim (the send may complete; retry once it has settled), 404
// for an unknown id. It takes no body and no query parameter.
func (a *API) cancel(w http.ResponseWriter, r *http.Request) {
	if e := checkParams(r.URL.Query(), nil); e != nil {
		writeError(w, http.StatusBadRequest, *e)
		return
	}
	id, ok := notificationID(w, r)
	if !ok {
		return
	}
	n, err := a.store.Cancel(r.Context(), id)
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, newNotificationView(n))
	case errors.Is(err, notify.ErrNotFound):
		writeError(w, http.StatusNotFound, noSuchNotification)
	case errors.Is(err, notify.ErrNotCancelable):
		writeError(w, http.StatusConflict, apiError{Code: "not_cancelable",
			Message: "the notification is " + string(n.Status) + ": only a pending or scheduled one can be canceled"})
	case errors.Is(err, notify.ErrSendInProgress):
		writeError(w, http.StatusConflict, apiError{Code: "send_in_progress",
			Message: "a send of the notification is in progress and may complete; read it again once it has settled"})
	default:
		a.unavailable(w, r, "cancel notification", err)
	}
}
