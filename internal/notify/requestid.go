package notify

import (
	"context"
	"strings"
)

// MaxRequestIDLen bounds a request id (the API's X-Request-Id).
const MaxRequestIDLen = 128

// ValidRequestID reports whether id may be used as a request id as it is:
// 1 to MaxRequestIDLen characters from [A-Za-z0-9._:@+=/-], so that it can
// be logged, carried in an event and echoed in a header without quoting.
func ValidRequestID(id string) bool {
	if id == "" || len(id) > MaxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("._:@+=/-", c) >= 0:
		default:
			return false
		}
	}
	return true
}

type requestIDKey struct{}

// WithRequestID returns ctx carrying the request id id: the id of the API
// request being served, or of the request that created the notification a
// worker delivers.
func WithRequestID(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestIDFrom returns the request id ctx carries, or "".
func RequestIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}
