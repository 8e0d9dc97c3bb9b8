package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"

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

// readyBody is the reply of GET /readyz. A 503 also carries the usual error
// object, so that clients parsing errors one way need no special case.
type readyBody struct {
	Status string    `json:"status"`
	Failed []string  `json:"failed,omitempty"`
	Error  *apiError `json:"error,omitempty"`
}

// readyz handles GET /readyz: it pings every check at once, each bounded by
// readyTimeout. Failures are named but their text is only logged, since a
// driver error may quote a DSN.
func (a *API) readyz(w http.ResponseWriter, r *http.Request) {
	errs := make([]error, len(a.cfg.Ready))
	var wg sync.WaitGroup
	for i, c := range a.cfg.Ready {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
			defer cancel()
			errs[i] = c.Pinger.Ping(ctx)
		})
	}
	wg.Wait()
	var failed []string
	for i, err := range errs {
		if err != nil {
			name := a.cfg.Ready[i].Name
			a.log.WarnContext(r.Context(), "readiness check failed", "check", name, "err", err)
			failed = append(failed, name)
		}
	}
	if len(failed) == 0 {
		writeJSON(w, http.StatusOK, readyBody{Status: "ok"})
		return
	}
	writeJSON(w, http.StatusServiceUnavailable, readyBody{
		Status: "unavailable",
		Failed: failed,
		Error:  &apiError{Code: "not_ready", Message: "not ready: " + strings.Join(failed, ", ")},
	})
}
