//go:build bulkbench

package api_test

// What resolving costs a batch: batches of 1,000 plain items against
// batches of 1,000 items that each read a recipient (no to) and render a
// template, on each engine, over real HTTP, one client. Not a test of
// timings: it logs figures.
//
//	HERALD_BULK_BATCHES=10 go test -tags bulkbench -run TestBatchResolvedFigures -v ./internal/api/

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

func TestBatchResolvedFigures(t *testing.T) {
	batches := bulkN(t, "HERALD_BULK_BATCHES", 10)
	for _, eng := range batchEngines {
		t.Run(eng.name, func(t *testing.T) {
			e, st := resolvedSetup(t, eng.open, nil)
			const size = notify.MaxBatch
			for i := range size {
				_, err := st.PutRecipient(t.Context(), notify.Recipient{UserID: "r-" + strconv.Itoa(i), Addresses: map[string]string{notify.ChannelEmail: "r" + strconv.Itoa(i) + "@example.com"}, Locale: "de"})
				require.NoError(t, err)
			}
			run := func(kind string, item func(i int) any) {
				var took time.Duration
				for range batches {
					items := make([]any, size)
					for i := range items {
						items[i] = item(i)
					}
					body := batchBody(t, items...)
					start := time.Now()
					r := do(t, http.MethodPost, e.url+"/notifications/batch", jsonHeaders(), body)
					took += time.Since(start)
					for i, res := range results(t, r) {
						require.EqualValues(t, 201, res["status"], "%s item %d: %v", kind, i, res)
					}
				}
				n := batches * size
				t.Logf("%s %s: %d items in %d batches of %d: %.0f items/s (%.1f ms a batch)", eng.name, kind, n, batches, size,
					float64(n)/took.Seconds(), took.Seconds()*1000/float64(batches))
			}
			plain := func(i int) any { return bulkItem(i, false) }
			resolved := func(i int) any {
				return map[string]any{"user_id": "r-" + strconv.Itoa(i), "channel": "email", "template": "welcome", "data": map[string]any{"name": "Ada"}}
			}
			// Twice each, interleaved: the first round warms the caches.
			run("plain", plain)
			run("resolved", resolved)
			run("plain", plain)
			run("resolved", resolved)
		})
	}
}
