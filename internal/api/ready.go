package api

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
)

// readyBody is the reply of GET /readyz. A 503 also carries the usual error
// object, so that clients parsing errors one way need no special case.
type readyBody struct {
	Status string   `json:"status"`
	Failed []string `json:"failed,omitempty"`
	// Reasons holds the text of the failed checks that show it.
	Reasons map[string]string `json:"reasons,omitempty"`
	Error   *apiError         `json:"error,omitempty"`
}

// Ready is a GET /readyz handler: it pings every check at once, each bounded
// by readyTimeout, and answers 200 or 503 naming what failed. Failures are
// named but their text is only logged, since a driver error may quote a
// DSN. The API serves it, and so do the relay's and the worker's own
// listeners (HERALD_METRICS_ADDR), with checks of their own.
func Ready(checks []Check, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ready(w, r, checks, log)
	})
}

func ready(w http.ResponseWriter, r *http.Request, checks []Check, log *slog.Logger) {
	errs := make([]error, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
			defer cancel()
			errs[i] = c.Pinger.Ping(ctx)
		})
	}
	wg.Wait()
	var failed []string
	var reasons map[string]string
	for i, err := range errs {
		if err != nil {
			name := checks[i].Name
			log.WarnContext(r.Context(), "readiness check failed", "check", name, "err", err)
			failed = append(failed, name)
			if checks[i].ShowReason {
				if reasons == nil {
					reasons = map[string]string{}
				}
				reasons[name] = err.Error()
			}
		}
	}
	if len(failed) == 0 {
		writeJSON(w, http.StatusOK, readyBody{Status: "ok"})
		return
	}
	writeJSON(w, http.StatusServiceUnavailable, readyBody{
		Status:  "unavailable",
		Failed:  failed,
		Reasons: reasons,
		Error:   &apiError{Code: "not_ready", Message: "not ready: " + strings.Join(failed, ", ")},
	})
}
