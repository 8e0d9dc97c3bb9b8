// Package client is a Go client of herald's HTTP API: typed requests and
// replies, errors that carry the API's code and field, cursor iteration,
// idempotency keys on every create, and retries of 429 and 503 answers that
// honour Retry-After, bounded and cancelled with the context.
//
//	c, err := client.New("http://127.0.0.1:8080", client.WithToken(os.Getenv("HERALD_API_TOKEN")))
//	n, err := c.Create(ctx, client.CreateRequest{UserID: "u-42", Channel: "email",
//		To: "Ada <ada@example.com>", Subject: "Shipped", Body: "Your order is on its way."})
//
// The API it speaks is described in docs/api.md and served at /openapi.json.
//
// The client is a module of its own, apart from the server's: it needs the
// standard library only and Go 1.23, so a program that uses it gets
// nothing of herald's server (no database drivers, no Prometheus) in its
// go.mod or go.sum. Its versions are tagged client/vX.Y.Z in herald's
// repository:
//
//	go get github.com/heraldhq/herald/client@latest
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Defaults of the options.
const (
	// DefaultMaxAttempts is how many times a request is sent at most when
	// the answer is 429 or 503 (or, for a request that is safe to repeat,
	// when no answer came).
	DefaultMaxAttempts = 4
	// DefaultMaxRetryWait bounds one wait before a retry: a Retry-After
	// longer than this is not waited for; the error is returned at once.
	DefaultMaxRetryWait = 30 * time.Second
	// firstBackoff is the wait before the first retry when the answer
	// gave no Retry-After (or no answer came); it doubles each time.
	firstBackoff = 250 * time.Millisecond
	// maxReplyBytes bounds a reply read into memory.
	maxReplyBytes = 16 << 20
)

// Client calls one herald API. It is safe for concurrent use.
type Client struct {
	base        *url.URL
	http        *http.Client
	token       string
	maxAttempts int
	maxWait     time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends "Authorization: Bearer token" (the server's
// HERALD_API_TOKEN) with every request. An empty token sends none.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient sends the requests with hc instead of a client with a 30 s
// timeout.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithRetries sets how many times a request is sent at most (1: never
// retried) and the longest wait before one retry. Defaults:
// DefaultMaxAttempts, DefaultMaxRetryWait.
func WithRetries(maxAttempts int, maxWait time.Duration) Option {
	return func(c *Client) { c.maxAttempts, c.maxWait = maxAttempts, maxWait }
}

// New returns a client of the API at baseURL ("http://127.0.0.1:8080", or
// with a path prefix behind a proxy).
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("herald client: %q is not an http(s) URL", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	c := &Client{base: u, http: &http.Client{Timeout: 30 * time.Second}, maxAttempts: DefaultMaxAttempts, maxWait: DefaultMaxRetryWait}
	for _, o := range opts {
		o(c)
	}
	if c.maxAttempts < 1 {
		return nil, fmt.Errorf("herald client: at least one attempt, got %d", c.maxAttempts)
	}
	if c.maxWait < 0 {
		return nil, fmt.Errorf("herald client: the retry wait must not be negative, got %s", c.maxWait)
	}
	return c, nil
}

// NewIdempotencyKey returns a fresh random Idempotency-Key (32 hex
// characters). Create sets one when the request has none; keep the key of
// a create that you may send again later (after a crash, from a queue), so
// that the server answers the same notification instead of a second one.
func NewIdempotencyKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// request is one API call.
type request struct {
	method, path string
	query        url.Values
	body         any
	header       http.Header
	// repeatable: sending it twice does no harm (a read; a create with an
	// idempotency key), so a request that got no answer is sent again.
	repeatable bool
}

// do sends r, retrying 429 and 503 (and, when r is repeatable, a failure
// to get an answer), and decodes a 2xx reply into out (when not nil). A
// reply of another status is an *Error.
func (c *Client) do(ctx context.Context, r request, out any) (http.Header, error) {
	var body []byte
	if r.body != nil {
		var err error
		if body, err = marshal(r.body); err != nil {
			return nil, fmt.Errorf("herald client: encode request: %w", err)
		}
	}
	u := *c.base
	// r.path is escaped (a segment may hold an escaped "/", as a
	// destination key does): it is sent as written.
	p, err := url.PathUnescape(r.path)
	if err != nil {
		return nil, fmt.Errorf("herald client: path %q: %w", r.path, err)
	}
	u.RawPath = c.base.EscapedPath() + r.path
	u.Path += p
	u.RawQuery = r.query.Encode()
	backoff := firstBackoff
	for attempt := 1; ; attempt++ {
		h, wait, err := c.send(ctx, r, u.String(), body, out)
		if err == nil || attempt >= c.maxAttempts || ctx.Err() != nil {
			return h, err
		}
		var apiErr *Error
		switch {
		case errors.As(err, &apiErr):
			if apiErr.StatusCode != http.StatusTooManyRequests && apiErr.StatusCode != http.StatusServiceUnavailable {
				return h, err
			}
		case !r.repeatable:
			return h, err
		}
		if wait == 0 {
			wait = backoff
			backoff *= 2
		}
		if wait > c.maxWait {
			return h, err // asked to wait longer than we may: say so now
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return h, err
		case <-t.C:
		}
	}
}

// send makes one attempt; wait is the reply's Retry-After (0 when none).
func (c *Client) send(ctx context.Context, r request, target string, body []byte, out any) (http.Header, time.Duration, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, target, rd)
	if err != nil {
		return nil, 0, fmt.Errorf("herald client: %w", err)
	}
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("herald client: %s %s: %w", r.method, r.path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxReplyBytes))
	if err != nil {
		return resp.Header, 0, fmt.Errorf("herald client: %s %s: read reply: %w", r.method, r.path, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if out != nil {
			if err := json.Unmarshal(raw, out); err != nil {
				return resp.Header, 0, fmt.Errorf("herald client: %s %s: decode reply: %w", r.method, r.path, err)
			}
		}
		return resp.Header, 0, nil
	}
	e := &Error{StatusCode: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After"))}
	var eb struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Field   string `json:"field"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &eb) == nil && eb.Error.Code != "" {
		e.Code, e.Message, e.Field = eb.Error.Code, eb.Error.Message, eb.Error.Field
	} else {
		// Not herald's error shape (a proxy's page): keep its start.
		e.Message = strings.TrimSpace(string(raw[:min(len(raw), 200)]))
	}
	return resp.Header, e.RetryAfter, e
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// marshal is json.Marshal without HTML escaping, as the API writes.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
