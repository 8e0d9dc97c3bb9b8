// Package tracing holds what herald's parts share about OpenTelemetry
// traces: the tracer they start spans with, the W3C traceparent that
// carries a trace across the outbox row and the broker, and a slog handler
// that writes the trace and span ids (and the request id) into every log
// record made with a context carrying them. The tracer provider itself is built once, in
// cmd/herald, from the standard OTEL_* variables; without an endpoint every
// part gets the no-op provider and this package costs a few nil checks.
package tracing

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Name is the instrumentation scope of every herald span.
const Name = "github.com/heraldhq/herald"

// Tracer returns the herald tracer of tp; a nil tp gives the no-op tracer,
// so that a part whose Config names no provider traces nothing.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return noop.NewTracerProvider().Tracer(Name)
	}
	return tp.Tracer(Name)
}

// propagator reads and writes the W3C traceparent (and tracestate) header.
var propagator = propagation.TraceContext{}

// HeaderTraceparent is the W3C header name, used as is for the outbox
// column, the broker headers and the HTTP header.
const HeaderTraceparent = "traceparent"

// Traceparent returns the W3C traceparent of the span in ctx, or "" when
// ctx carries no valid span context (tracing off).
func Traceparent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c[HeaderTraceparent]
}

// Extract returns ctx with the remote span context traceparent names as its
// parent; an empty or malformed traceparent leaves ctx as it is.
func Extract(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{HeaderTraceparent: traceparent})
}

// ExtractHTTP returns ctx with the span context of a request's traceparent
// and tracestate headers, when they are valid.
func ExtractHTTP(ctx context.Context, h propagation.TextMapCarrier) context.Context {
	return propagator.Extract(ctx, h)
}

// TraceID returns the trace id of the span in ctx when that span is sampled
// (recorded and exported), for a metric's exemplar; "" otherwise.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return ""
	}
	return sc.TraceID().String()
}
