package client_test

// The client's own handling of HTTP, against stub servers. Its behaviour
// against the real API (creates, retries of 429 with Retry-After, a lost
// answer, cursors, dead letters, errors) is tested in the server's module,
// internal/clientcheck, which can start herald's API in process.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/client"
)

func TestNewRefusesBadSettings(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", "localhost:8080", "ftp://x", "http://", "://x"} {
		if _, err := client.New(bad); err == nil {
			t.Errorf("New(%q): no error", bad)
		}
	}
	if _, err := client.New("http://127.0.0.1:8080", client.WithRetries(0, time.Second)); err == nil || !strings.Contains(err.Error(), "at least one attempt") {
		t.Errorf("no attempts: %v", err)
	}
	if _, err := client.New("http://127.0.0.1:8080", client.WithRetries(1, -time.Second)); err == nil || !strings.Contains(err.Error(), "must not be negative") {
		t.Errorf("negative wait: %v", err)
	}
}

// stub serves handler and returns a client of it with opts.
func stub(t *testing.T, handler http.HandlerFunc, opts ...client.Option) *client.Client {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL+"/herald/", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A path prefix of the base URL (behind a proxy) is kept; a destination
// key is escaped once, as the API expects it; the token and the headers go
// with every request.
func TestRequestShape(t *testing.T) {
	t.Parallel()
	var got []string
	c := stub(t, func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.EscapedPath()+" "+r.Header.Get("Authorization")+" "+r.Header.Get("Accept"))
		w.WriteHeader(http.StatusNoContent)
	}, client.WithToken("t0k"))
	if err := c.EnableDestination(context.Background(), "webhook:https://example.com/a b"); err != nil {
		t.Fatal(err)
	}
	want := "POST /herald/destinations/webhook:https:%2F%2Fexample.com%2Fa%20b/enable Bearer t0k application/json"
	if len(got) != 1 || got[0] != want {
		t.Errorf("requests %q, want [%q]", got, want)
	}
}

// Every create carries an Idempotency-Key: the request's, or a fresh one.
func TestCreateIdempotencyKey(t *testing.T) {
	t.Parallel()
	var keys []string
	c := stub(t, func(w http.ResponseWriter, r *http.Request) {
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"7","status":"pending"}`)
	})
	req := client.CreateRequest{UserID: "u", Channel: "email", To: "a@example.com", Subject: "s", Body: "b"}
	for _, key := range []string{"", "mine"} {
		req.IdempotencyKey = key
		n, err := c.Create(context.Background(), req)
		if err != nil || n.ID != "7" {
			t.Fatalf("create: %+v %v", n, err)
		}
	}
	if len(keys) != 2 || len(keys[0]) != 32 || keys[1] != "mine" {
		t.Errorf("keys %q: want a fresh 32-character key, then the request's", keys)
	}
	if a, b := client.NewIdempotencyKey(), client.NewIdempotencyKey(); a == b || len(a) != 32 {
		t.Errorf("NewIdempotencyKey: %q, %q", a, b)
	}
}

// A reply that is not herald's (a proxy's error page) is an *Error with
// the status and the start of the page; a 502 is not retried.
func TestErrorFromProxyPage(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	c := stub(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, "  <html>"+strings.Repeat("x", 500)+"</html>")
	})
	_, err := c.Get(context.Background(), "1")
	var apiErr *client.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("want *client.Error, got %v", err)
	}
	if apiErr.StatusCode != http.StatusBadGateway || apiErr.Code != "" || apiErr.Message != "<html>"+strings.Repeat("x", 192) {
		t.Errorf("error %+v", apiErr)
	}
	if !strings.HasPrefix(err.Error(), "herald API: 502: <html>") {
		t.Errorf("Error() = %q", err.Error())
	}
	if calls.Load() != 1 {
		t.Errorf("%d calls, want 1", calls.Load())
	}
}

// A 503 with an HTTP-date Retry-After in the past is retried at once; the
// attempts are bounded.
func TestRetryAfterDate(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	c := stub(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Retry-After", time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":{"code":"unavailable","message":"store down"}}`)
	}, client.WithRetries(3, time.Minute))
	_, err := c.Get(context.Background(), "1")
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Code != client.CodeUnavailable || apiErr.RetryAfter != 0 {
		t.Fatalf("error %v", err)
	}
	if calls.Load() != 3 {
		t.Errorf("%d calls, want 3", calls.Load())
	}
}
