package tracing

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/heraldhq/herald/internal/notify"
)

// LogHandler wraps a slog.Handler (text or JSON) so that every record made
// with a context carrying a valid span gets trace_id and span_id
// attributes, and one made with a context carrying a request id
// (notify.WithRequestID) a request_id attribute: a log line of a delivery
// can be found from its trace and the other way round, and the API's lines
// of one request share the id with the worker's lines of its delivery.
// Records without either, or made without a context, are passed on
// unchanged.
type LogHandler struct {
	next slog.Handler
}

// NewLogHandler wraps next, unless next is a LogHandler already.
func NewLogHandler(next slog.Handler) *LogHandler {
	if h, ok := next.(*LogHandler); ok {
		return h
	}
	return &LogHandler{next: next}
}

// Enabled reports whether next handles records of level l.
func (h *LogHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle adds the span's ids and the request id to r and passes it on.
func (h *LogHandler) Handle(ctx context.Context, r slog.Record) error {
	sc := trace.SpanContextFromContext(ctx)
	id := notify.RequestIDFrom(ctx)
	if sc.IsValid() || id != "" {
		r = r.Clone()
	}
	if id != "" {
		r.AddAttrs(slog.String("request_id", id))
	}
	if sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs returns the handler with attrs added to every record.
func (h *LogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &LogHandler{next: h.next.WithAttrs(attrs)}
}

// WithGroup returns the handler with later attributes in group name. The
// trace ids, added at Handle, land in the group too: slog gives a handler
// no way to add an attribute at the top level after a group opened.
func (h *LogHandler) WithGroup(name string) slog.Handler {
	return &LogHandler{next: h.next.WithGroup(name)}
}
