package api

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics are the API's request metrics. A nil *httpMetrics records
// nothing, so the edge need not ask whether metrics are on.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// create times the create transaction (the store's Create) of the
	// creates that committed or were replayed, with trace exemplars.
	create prometheus.Histogram
	// batch times the transaction of each batch (POST
	// /notifications/batch) that committed, whatever its size.
	batch prometheus.Histogram
	// batchItems counts the items of batches by the status of each.
	batchItems *prometheus.CounterVec
}

func newHTTPMetrics(reg prometheus.Registerer) (*httpMetrics, error) {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_http_requests_total",
			Help: "HTTP requests answered by the API, by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "herald_http_request_duration_seconds",
			Help:    "Time to answer an HTTP request, by route pattern.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route"}),
		create: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "herald_create_seconds",
			Help:    "Time of the create transaction (the notification and its outbox event) of the creates that succeeded.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "herald_create_batch_seconds",
			Help:    "Time of the transaction of a batch create (POST /notifications/batch) that succeeded, whatever its size.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		batchItems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_batch_items_total",
			Help: "Items of batch creates (POST /notifications/batch) answered, by the status of each item.",
		}, []string{"status"}),
	}
	// Each status an item can answer is served from the start (at 0), so
	// that a rate over it needs no first batch.
	for _, st := range []int{http.StatusCreated, http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge} {
		m.batchItems.WithLabelValues(strconv.Itoa(st))
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.create, m.batch, m.batchItems} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register http metrics: %w", err)
		}
	}
	return m, nil
}

func (m *httpMetrics) observe(route string, code int, d time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(route).Observe(d.Seconds())
}

// countBatch counts a batch's items by their status.
func (m *httpMetrics) countBatch(results []batchResult) {
	if m == nil {
		return
	}
	for _, r := range results {
		m.batchItems.WithLabelValues(strconv.Itoa(r.Status)).Inc()
	}
}
