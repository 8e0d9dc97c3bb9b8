package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// RetryAfterError is returned (possibly wrapped) by Config.Admission to shed
// load: the create answers 429 with a Retry-After header and writes nothing.
type RetryAfterError struct {
	// After is how long the client should wait; it is rounded up to whole
	// seconds, and at least 1.
	After time.Duration
}

// Error says how long to wait; it is logged, never sent to the client.
func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("too many requests, retry after %s", e.After)
}

// msgUnauthorized answers a request without the token: it names the
// setting the token comes from, so that whoever reads it (a CLI user with
// HERALD_API_URL, a script) knows what to pass. The name of a setting is
// no secret; the token's value never appears.
const msgUnauthorized = "a valid bearer token is required: send Authorization: Bearer <token>, the token the API was started with (HERALD_API_TOKEN)"

// apiError is the body of every error reply.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

type errorBody struct {
	Error apiError `json:"error"`
}

func writeError(w http.ResponseWriter, status int, e apiError) {
	writeJSON(w, status, errorBody{Error: e})
}

// writeJSON writes v as the whole reply. The values it is given are built
// from plain strings and numbers, so encoding cannot fail. <, > and & are
// written as they are, not as \u003c...: a reply is JSON, never HTML, and
// "Ada <ada@example.com>" must come back as it was sent (nosniff keeps a
// browser from reading it as anything else).
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := marshalJSON(v)
	if err != nil {
		b = []byte(`{"error":{"code":"internal","message":"internal error"}}`)
		status = http.StatusInternalServerError
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// marshalJSON is json.Marshal without HTML escaping, as every reply of the
// API is written (and the command line prints the same shapes).
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// retryAfterSeconds renders d for a Retry-After header: whole seconds,
// rounded up, at least 1 (0 would invite an immediate retry storm).
func retryAfterSeconds(d time.Duration) string {
	s := math.Ceil(d.Seconds())
	if s < 1 || math.IsNaN(s) {
		s = 1
	}
	if s > 86400 {
		s = 86400
	}
	return strconv.Itoa(int(s))
}
