package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/tracing"
)

const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestTraceparentRoundTrip(t *testing.T) {
	t.Parallel()
	require.Empty(t, tracing.Traceparent(context.Background()), "no span, no traceparent")
	require.Equal(t, parent, tracing.Traceparent(tracing.Extract(context.Background(), parent)))
	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		require.Empty(t, tracing.Traceparent(tracing.Extract(context.Background(), bad)), bad)
	}

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, span := tracing.Tracer(tp).Start(tracing.Extract(context.Background(), parent), "child")
	tpc := tracing.Traceparent(ctx)
	span.End()
	require.True(t, strings.HasPrefix(tpc, "00-4bf92f3577b34da6a3ce929d0e0e4736-"), tpc)
	require.NotContains(t, tpc, "00f067aa0ba902b7", "the child's own span id travels on")
	require.Len(t, rec.Ended(), 1)
	require.Equal(t, "00f067aa0ba902b7", rec.Ended()[0].Parent().SpanID().String())
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", tracing.TraceID(ctx))

	_, nspan := tracing.Tracer(nil).Start(context.Background(), "noop")
	require.False(t, nspan.IsRecording(), "a nil provider traces nothing")
}

func TestLogHandlerAddsIDs(t *testing.T) {
	t.Parallel()
	ctx := tracing.Extract(context.Background(), parent)
	var text, js bytes.Buffer
	for _, l := range []*slog.Logger{
		slog.New(tracing.NewLogHandler(slog.NewTextHandler(&text, nil))).With("component", "worker"),
		slog.New(tracing.NewLogHandler(slog.NewJSONHandler(&js, nil))).With("component", "worker"),
	} {
		l.InfoContext(ctx, "with span", "k", "v")
		l.Info("without span")
	}
	lines := strings.Split(strings.TrimSpace(text.String()), "\n")
	require.Len(t, lines, 2)
	require.Contains(t, lines[0], "trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7")
	require.Contains(t, lines[0], "component=worker")
	require.NotContains(t, lines[1], "trace_id")

	dec := json.NewDecoder(&js)
	var with, without map[string]any
	require.NoError(t, dec.Decode(&with))
	require.NoError(t, dec.Decode(&without))
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", with["trace_id"])
	require.Equal(t, "00f067aa0ba902b7", with["span_id"])
	require.NotContains(t, without, "trace_id")
}

// A context carrying a request id adds request_id, with or without a span;
// wrapping a LogHandler again adds nothing twice.
func TestLogHandlerAddsRequestID(t *testing.T) {
	t.Parallel()
	var text bytes.Buffer
	l := slog.New(tracing.NewLogHandler(tracing.NewLogHandler(slog.NewTextHandler(&text, nil))))
	l.InfoContext(notify.WithRequestID(context.Background(), "req-1"), "request only")
	l.InfoContext(notify.WithRequestID(tracing.Extract(context.Background(), parent), "req-2"), "both")
	l.InfoContext(context.Background(), "neither")
	lines := strings.Split(strings.TrimSpace(text.String()), "\n")
	require.Len(t, lines, 3)
	require.Contains(t, lines[0], "request_id=req-1")
	require.NotContains(t, lines[0], "trace_id")
	require.Contains(t, lines[1], "request_id=req-2 trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7")
	require.Equal(t, 1, strings.Count(lines[1], "request_id="), "wrapped twice, added once")
	require.NotContains(t, lines[2], "request_id")
}

func TestObserveExemplar(t *testing.T) {
	t.Parallel()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x_seconds", Buckets: []float64{1}})
	tracing.Observe(context.Background(), h, 0.5)
	unsampled := trace.ContextWithSpanContext(context.Background(), trace.SpanContextFromContext(
		tracing.Extract(context.Background(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")))
	tracing.Observe(unsampled, h, 0.5)
	var m dto.Metric
	require.NoError(t, h.Write(&m))
	require.Nil(t, m.GetHistogram().GetBucket()[0].GetExemplar(), "no sampled span, no exemplar")

	tracing.Observe(tracing.Extract(context.Background(), parent), h, 0.5)
	require.NoError(t, h.Write(&m))
	ex := m.GetHistogram().GetBucket()[0].GetExemplar()
	require.NotNil(t, ex)
	require.Equal(t, "trace_id", ex.GetLabel()[0].GetName())
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", ex.GetLabel()[0].GetValue())
	require.EqualValues(t, 3, m.GetHistogram().GetSampleCount())
}

// BenchmarkDeliveryTracingOff is what a delivery pays for tracing when
// this process's tracing is off (the default): the worker's extract of the
// message's traceparent, a no-op tracer's four spans, the exemplar check.
// "untraced": nothing upstream traced either (no traceparent); "upstream":
// the message carries a sampled traceparent, so the exemplar is recorded.
func BenchmarkDeliveryTracingOff(b *testing.B) {
	tr := tracing.Tracer(nil)
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x_seconds"})
	for _, bc := range []struct{ name, traceparent string }{{"untraced", ""}, {"upstream", parent}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ctx, span := tr.Start(tracing.Extract(context.Background(), bc.traceparent), "process")
				for _, name := range []string{"claim", "send email", "record"} {
					_, s := tr.Start(ctx, name)
					s.End()
				}
				tracing.Observe(ctx, h, 0.1)
				span.End()
			}
		})
	}
}
