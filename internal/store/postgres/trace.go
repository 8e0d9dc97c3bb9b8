package postgres

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldhq/herald/internal/tracing"
)

// queryTracer makes a client span of every query and batch run with a
// recording span in its context, through pgx's QueryTracer and BatchTracer
// hooks. The span holds the statement's text (herald's statements are
// constants with $n placeholders) and never its arguments, which hold
// addresses and bodies.
type queryTracer struct {
	tracer trace.Tracer
}

func newQueryTracer(tp trace.TracerProvider) *queryTracer {
	return &queryTracer{tracer: tracing.Tracer(tp)}
}

var dbSystem = attribute.String("db.system.name", "postgresql")

func (t *queryTracer) start(ctx context.Context, name string, attrs ...attribute.KeyValue) context.Context {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx
	}
	ctx, _ = t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(append(attrs, dbSystem)...))
	return ctx
}

// end ends the span start made. A span in ctx that is recording is always
// start's own: start makes one whenever its caller's span records, and a
// caller without a recording span leaves ctx with none that records.
func end(ctx context.Context, err error) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "query failed")
	}
	span.End()
}

// TraceQueryStart implements pgx.QueryTracer.
func (t *queryTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return t.start(ctx, operation(data.SQL), attribute.String("db.query.text", data.SQL))
}

// TraceQueryEnd implements pgx.QueryTracer.
func (t *queryTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	end(ctx, data.Err)
}

// TraceBatchStart implements pgx.BatchTracer.
func (t *queryTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	return t.start(ctx, "batch", attribute.Int("db.operation.batch.size", data.Batch.Len()))
}

// TraceBatchQuery implements pgx.BatchTracer; the batch's span covers its
// queries.
func (t *queryTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (t *queryTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	end(ctx, data.Err)
}

// operation is the span name of a statement: its first keyword ("INSERT",
// "SELECT", "WITH", "begin"), so that names stay few.
func operation(sql string) string {
	f := strings.Fields(sql)
	if len(f) == 0 {
		return "query"
	}
	return strings.ToUpper(f[0])
}
