package client

import (
	"fmt"
	"time"
)

// The API's error codes (Error.Code): stable, for programs. The OpenAPI
// document's ErrorCode lists them all.
const (
	CodeInvalidJSON          = "invalid_json"
	CodeInvalidUTF8          = "invalid_utf8"
	CodeInvalidField         = "invalid_field"
	CodeUnknownField         = "unknown_field"
	CodeInvalidHeader        = "invalid_header"
	CodeInvalidCursor        = "invalid_cursor"
	CodeEmptySelection       = "empty_selection"
	CodeUnauthorized         = "unauthorized"
	CodeNotFound             = "not_found"
	CodeIdempotencyConflict  = "idempotency_conflict"
	CodeNotCancelable        = "not_cancelable"
	CodeSendInProgress       = "send_in_progress"
	CodeTooLarge             = "too_large"
	CodeUnsupportedMediaType = "unsupported_media_type"
	CodeTooManyRequests      = "too_many_requests"
	CodeUnavailable          = "unavailable"
)

// Error is an answer of the API other than a success: its HTTP status and
// the error object of the reply. Find it with errors.As.
type Error struct {
	// StatusCode is the HTTP status (400, 404, 429, ...).
	StatusCode int
	// Code is the API's stable code (CodeInvalidField, ...); empty when the
	// reply was not herald's (a proxy's error page).
	Code string
	// Message is for people.
	Message string
	// Field names the body field, header or query parameter at fault, when
	// there is one.
	Field string
	// RetryAfter is the reply's Retry-After (429, 503), 0 when it has none.
	RetryAfter time.Duration
}

// Error says the status, the code, the field and the message.
func (e *Error) Error() string {
	s := fmt.Sprintf("herald API: %d", e.StatusCode)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Field != "" {
		s += " (" + e.Field + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}
