package notify

import (
	"context"
	"log/slog"
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

// NewLogHandler wraps h so that every record logged with a context that
// carries a request id (WithRequestID) gets a request_id attribute: the
// API's lines of one request and the worker's lines of its delivery share
// it.
func NewLogHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(requestIDHandler); ok {
		return h
	}
	return requestIDHandler{h}
}

type requestIDHandler struct{ slog.Handler }

func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestIDFrom(ctx); id != "" {
		r = r.Clone()
		r.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestIDHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(as)}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}
