package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
)

// FuzzCreate posts arbitrary bodies, content types and idempotency keys.
// Whatever arrives, the API must not panic nor answer 5xx, every reply must
// be JSON, and a notification is written exactly when the answer is a fresh
// 201 (guarantee 1: any other answer means nothing exists).
//
// It calls the handler directly rather than over a socket, so that it also
// sees header values an HTTP client would refuse to send.
func FuzzCreate(f *testing.F) {
	e := setup(f, api.Config{MaxBodyBytes: 64 << 10})

	f.Fuzz(func(t *testing.T, body []byte, contentType, key string) {
		before, _ := e.rows(t)
		req := httptest.NewRequest(http.MethodPost, "http://localhost/notifications", bytes.NewReader(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		rec := httptest.NewRecorder()
		e.handler.ServeHTTP(rec, req)

		require.Less(t, rec.Code, 500, "reply %s", rec.Body)
		require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		var reply map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &reply), "reply %q", rec.Body)

		after, outbox := e.rows(t)
		require.Equal(t, after, outbox, "every notification has its event")
		fresh := rec.Code == http.StatusCreated && rec.Header().Get("Idempotent-Replayed") == ""
		if fresh {
			require.Equal(t, before+1, after, "a fresh 201 wrote one notification")
		} else {
			require.Equal(t, before, after, "status %d wrote a notification: %s", rec.Code, rec.Body)
		}
		if rec.Code != http.StatusCreated {
			require.Contains(t, reply, "error")
		}
	})
}
