package clientcheck_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/client"
)

func setup(t *testing.T, opts ...client.Option) (*herald, *client.Client) {
	t.Helper()
	h := startHerald()
	t.Cleanup(h.Close)
	c, err := client.New(h.URL, append([]client.Option{client.WithToken(token)}, opts...)...)
	require.NoError(t, err)
	return h, c
}

func email(subject string) client.CreateRequest {
	return client.CreateRequest{UserID: "u-1", Channel: "email", To: "Ada <ada@example.com>", Subject: subject, Body: "b"}
}

func count(t *testing.T, c *client.Client) int {
	t.Helper()
	n := 0
	for _, err := range c.ListAll(t.Context(), client.ListOptions{}) {
		require.NoError(t, err)
		n++
	}
	return n
}

// A 429 is retried after its Retry-After, and the create happens once.
func TestRetryHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	h, c := setup(t)
	h.shed.Store(1)
	start := time.Now()
	n, err := c.Create(t.Context(), email("s"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), time.Second, "waited for Retry-After: 1")
	require.Equal(t, "1", n.ID)
	require.Equal(t, 1, count(t, c))
}

// A Retry-After longer than the client may wait is returned at once, as an
// *Error carrying it; so is the last 429 when the attempts are spent.
func TestRetryBounded(t *testing.T) {
	t.Parallel()
	h, c := setup(t, client.WithRetries(4, 500*time.Millisecond))
	h.shed.Store(5)
	start := time.Now()
	_, err := c.Create(t.Context(), email("s"))
	require.Less(t, time.Since(start), time.Second, "did not wait")
	var apiErr *client.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusTooManyRequests, apiErr.StatusCode)
	require.Equal(t, client.CodeTooManyRequests, apiErr.Code)
	require.Equal(t, time.Second, apiErr.RetryAfter)

	h2, once := setup(t, client.WithRetries(1, time.Minute))
	h2.shed.Store(1)
	_, err = once.Create(t.Context(), email("s"))
	require.True(t, errors.As(err, &apiErr), "one attempt: no retry")
	require.Zero(t, count(t, once))
}

// A wait for a retry ends with the context.
func TestRetryStopsWithContext(t *testing.T) {
	t.Parallel()
	h, c := setup(t)
	h.shed.Store(100)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Create(ctx, email("s"))
	require.Error(t, err)
	require.Less(t, time.Since(start), 900*time.Millisecond)
}

// A create whose answer was lost is sent again with the same idempotency
// key: one notification, answered as a replay.
func TestCreateRetriedAfterLostAnswer(t *testing.T) {
	t.Parallel()
	h, _ := setup(t)
	var calls atomic.Int32
	lossy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && calls.Add(1) == 1 {
			// Herald takes the create; the answer is lost on the way.
			h.srv.Config.Handler.ServeHTTP(httptest.NewRecorder(), r)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		h.srv.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(lossy.Close)
	c, err := client.New(lossy.URL, client.WithToken(token))
	require.NoError(t, err)
	n, err := c.Create(t.Context(), email("s"))
	require.NoError(t, err)
	require.True(t, n.Replayed, "the second attempt was answered from the first")
	require.EqualValues(t, 2, calls.Load())
	require.Equal(t, 1, count(t, c))
}

// Without the token: 401, code unauthorized; a limit over the most, 400
// naming the field.
func TestErrors(t *testing.T) {
	t.Parallel()
	h, _ := setup(t)
	c, err := client.New(h.URL + "/")
	require.NoError(t, err)
	_, err = c.Get(t.Context(), "1")
	var apiErr *client.Error
	require.True(t, errors.As(err, &apiErr))
	require.Equal(t, http.StatusUnauthorized, apiErr.StatusCode)
	require.Equal(t, client.CodeUnauthorized, apiErr.Code)
	require.Contains(t, apiErr.Error(), "401 unauthorized")
	_, c2 := setup(t)
	_, err = c2.DeadLetters(t.Context(), client.DeadLetterOptions{Limit: 501})
	require.True(t, errors.As(err, &apiErr))
	require.Equal(t, "limit", apiErr.Field)
}
