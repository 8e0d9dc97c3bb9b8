package raw

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/heraldhq/herald/internal/bench"
)

// POSTOptions tunes POST.
type POSTOptions struct {
	// URL is where the requests go. Required.
	URL string
	// N is the number of requests. Required.
	N int
	// Clients is the number of requests under way at once. Required.
	Clients int
	// Body returns the i-th request's JSON body. Required.
	Body func(i int) []byte
}

// POST measures the raw HTTP POST ceiling of an endpoint: N POSTs of
// Body(i) with Content-Type application/json from Clients goroutines at
// once, over kept-alive connections (one per client), each counted when
// its 2xx has been read. No signing, no guard, no classification: what
// herald's webhook sender could at best reach against the same endpoint at
// the same concurrency.
func POST(ctx context.Context, o POSTOptions) (float64, error) {
	tr := &http.Transport{
		Proxy:               nil,
		MaxIdleConns:        o.Clients,
		MaxIdleConnsPerHost: o.Clients,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: time.Minute}
	post := func(ctx context.Context, i int) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.URL, bytes.NewReader(o.Body(i)))
		if err != nil {
			return fmt.Errorf("raw POST: %w", err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			return fmt.Errorf("raw POST: %w", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("raw POST: status %d", resp.StatusCode)
		}
		return nil
	}
	// The connections are opened before the clock starts, as herald's
	// sender has its own open after the warm-up.
	if _, err := bench.Ceiling(ctx, o.Clients, o.Clients, post); err != nil {
		return 0, err
	}
	return bench.Ceiling(ctx, o.N, o.Clients, post)
}
