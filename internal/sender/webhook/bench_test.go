package webhook_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/webhook"
)

// benchParallelism is the goroutines per GOMAXPROCS that send at once: a
// worker sends many webhooks in flight, and with a 100 ms endpoint the
// rate is bounded by how many.
const benchParallelism = 32

// BenchmarkSend measures sends/s of the webhook sender against a local
// receiver answering at once and after 100 ms, beside a raw http.Client
// POST loop against the same receiver as the ceiling (no signing, no
// guard, no classification).
func BenchmarkSend(b *testing.B) {
	body := `{"type":"order.shipped","order":{"id":"ord_123456","items":3,"total":"42.10","currency":"EUR"},"user":"u_987"}`
	for _, delay := range []time.Duration{0, 100 * time.Millisecond} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			if delay > 0 {
				time.Sleep(delay) // the endpoint's own work
			}
			w.WriteHeader(http.StatusNoContent)
		}))
		b.Run(fmt.Sprintf("herald/delay=%s", delay), func(b *testing.B) {
			s, err := webhook.New(webhook.Config{Secret: testSecret, Allow: loopback, Timeout: 10 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var n atomic.Int64
			b.SetParallelism(benchParallelism)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := strconv.FormatInt(n.Add(1), 10)
					m := notify.Outgoing{NotificationID: id, Channel: "webhook", To: srv.URL + "/hooks", Body: body}
					if err := s.Send(context.Background(), m); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sends/s")
		})
		b.Run(fmt.Sprintf("raw/delay=%s", delay), func(b *testing.B) {
			tr := &http.Transport{MaxIdleConnsPerHost: 32, MaxIdleConns: 1024}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			b.SetParallelism(benchParallelism)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := c.Post(srv.URL+"/hooks", "application/json", strings.NewReader(body))
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode/100 != 2 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sends/s")
		})
		srv.Close()
	}
}
