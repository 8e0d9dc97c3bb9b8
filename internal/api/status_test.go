package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/deployment"
	"github.com/heraldhq/herald/internal/notify"
)

// fixedQueues is a broker that reports one send queue with no consumer,
// or fails.
type fixedQueues struct{ err error }

func (q fixedQueues) QueueDepths(context.Context) ([]notify.QueueDepth, error) {
	if q.err != nil {
		return nil, q.err
	}
	none := 0
	return []notify.QueueDepth{{Name: "notifications.send", Role: notify.QueueSend, Ready: 3, Consumers: &none}}, nil
}

// statusOf reads st's deployment for GET /status, over a broker that
// reports its send queue.
func statusOf(t *testing.T, st deployment.Records, live time.Duration, q deployment.Queues) api.Status {
	t.Helper()
	r, err := deployment.NewReader(st, deployment.ReaderConfig{Transport: "rabbitmq", Queues: q, LiveWithin: live, QueueTimeout: time.Second})
	require.NoError(t, err)
	return r
}

// GET /status answers what is pending, the broker's queues and the
// processes' reports, live or gone; a broker that fails is named, not a
// failure of the route.
func TestStatus(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{})
	ctx := t.Context()
	for i := range 3 {
		_, err := e.store.Create(ctx, notify.NewNotification{Request: notify.CreateRequest{
			UserID: "u", Channel: "email", To: "a@example.com", Subject: "s", Body: string(rune('a' + i)),
		}})
		require.NoError(t, err)
	}
	since := time.Now().Add(-time.Minute).UTC()
	require.NoError(t, e.store.BeatProcess(ctx, notify.Process{ID: "w1", Host: "h", PID: 9, Roles: []string{"worker"}, Version: "v1",
		StartedAt: since, Senders: []notify.SenderReport{{Channel: "email", Up: false, Class: "down", Reason: "dial tcp: refused", Since: since}}}, time.Hour))

	get := func(st api.Status) map[string]any {
		t.Helper()
		a, err := api.New(e.store, api.Config{Status: st})
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodGet, "http://localhost/status", nil)
		require.NoError(t, err)
		w := httptest.NewRecorder()
		a.Handler().ServeHTTP(w, req)
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		var out map[string]any
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &out))
		return out
	}
	out := get(statusOf(t, e.store, time.Minute, fixedQueues{}))
	ns := out["notifications"].(map[string]any)
	require.EqualValues(t, 3, ns["pending"])
	require.Greater(t, ns["oldest_pending_seconds"].(float64), 0.0)
	require.Equal(t, "rabbitmq", out["transport"])
	q := out["queues"].([]any)[0].(map[string]any)
	require.Equal(t, "send", q["role"])
	require.EqualValues(t, 3, q["ready"])
	require.EqualValues(t, 0, q["consumers"])
	require.Nil(t, q["in_flight"])
	require.Nil(t, out["queues_error"])
	p := out["processes"].([]any)[0].(map[string]any)
	require.Equal(t, "live", p["state"])
	require.Equal(t, []any{"worker"}, p["roles"])
	s := p["senders"].([]any)[0].(map[string]any)
	require.Equal(t, "down", s["state"])
	require.Equal(t, "dial tcp: refused", s["reason"])
	require.Regexp(t, `Z$`, s["since"])

	// A report older than the live window is gone; a broker that fails
	// is named.
	out = get(statusOf(t, e.store, time.Nanosecond, fixedQueues{err: context.DeadlineExceeded}))
	require.Equal(t, "gone", out["processes"].([]any)[0].(map[string]any)["state"])
	require.Equal(t, []any{}, out["queues"])
	require.Contains(t, out["queues_error"], "the broker did not answer")
}
