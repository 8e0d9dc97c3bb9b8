package tracing

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// Observe records v in o, with the trace id of ctx's span as the
// observation's exemplar when that span is sampled: a dashboard can jump
// from a slow bucket to one of its traces. Prometheus keeps exemplars only
// from an OpenMetrics scrape (promhttp's EnableOpenMetrics).
func Observe(ctx context.Context, o prometheus.Observer, v float64) {
	if id := TraceID(ctx); id != "" {
		if eo, ok := o.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": id})
			return
		}
	}
	o.Observe(v)
}
