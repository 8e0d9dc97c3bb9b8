package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/webhook"
)

func statusEvent(id int64, typ string) notify.Event {
	return notify.Event{ID: id, Type: typ, OccurredAt: time.Now(),
		Payload: fmt.Appendf(nil, `{"notification_id":"%d","user_id":"u","channel":"email","status":"sent","attempts":1,"at":"2026-12-01T10:00:00Z","last_error":""}`, id)}
}

func newStatusPublisher(t *testing.T, url string) *webhook.StatusPublisher {
	t.Helper()
	p, err := webhook.NewStatusPublisher(webhook.StatusConfig{URL: url, Secret: testSecret, Timeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// The status URL is the operator's: a loopback receiver is reached without
// HERALD_WEBHOOK_ALLOW. Each event is signed, its webhook-id is stable per
// outbox id, its body {"type","data"}.
func TestStatusPublisherSignsAndConfirms(t *testing.T) {
	t.Parallel()
	r := startReceiver(t)
	p := newStatusPublisher(t, r.url("/status"))
	evs := []notify.Event{statusEvent(7, notify.EventSent), statusEvent(9, notify.EventFailed)}
	confirmed, err := p.Publish(t.Context(), evs)
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{7, 9}, confirmed)

	got := map[string]webhook.StatusBody{}
	for _, q := range r.requests() {
		require.NoError(t, verify(testSecret, q.Header, q.Body), "signature")
		var b webhook.StatusBody
		require.NoError(t, json.Unmarshal(q.Body, &b))
		got[q.Header.Get("webhook-id")] = b
	}
	require.Len(t, got, 2)
	require.Equal(t, notify.EventSent, got["evt_7"].Type)
	require.Equal(t, notify.EventFailed, got["evt_9"].Type)
	ev, err := notify.DecodeStatus(got["evt_7"].Data)
	require.NoError(t, err)
	require.Equal(t, "7", ev.NotificationID)

	// Sent again (the relay's next batch after a lost mark): the same id.
	_, err = p.Publish(t.Context(), evs[:1])
	require.NoError(t, err)
	reqs := r.requests()
	require.Equal(t, "evt_7", reqs[len(reqs)-1].Header.Get("webhook-id"))
}

// Any non-2xx leaves the event unconfirmed, with an error that never stops
// the relay (not permanent), a 410 included; a receiver that is down stops
// the batch early.
func TestStatusPublisherFailures(t *testing.T) {
	t.Parallel()
	r := startReceiver(t)
	p := newStatusPublisher(t, r.url("/status"))
	for _, code := range []int{http.StatusServiceUnavailable, http.StatusGone, http.StatusBadRequest, http.StatusFound} {
		r.answer(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) })
		confirmed, err := p.Publish(t.Context(), []notify.Event{statusEvent(1, notify.EventSent)})
		require.Error(t, err, "status %d", code)
		require.False(t, notify.IsPermanent(err), "status %d stops the relay", code)
		require.Empty(t, confirmed)
	}
	// Half succeed: those are confirmed.
	r.answer(func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get("webhook-id") == "evt_2" {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	confirmed, err := p.Publish(t.Context(), []notify.Event{statusEvent(1, notify.EventSent), statusEvent(2, notify.EventSent), statusEvent(3, notify.EventFailed)})
	require.Error(t, err)
	require.ElementsMatch(t, []int64{1, 3}, confirmed)

	// Down: refused connections, the rest of the batch not tried.
	r.srv.Close()
	before := len(r.requests())
	many := make([]notify.Event, 50)
	for i := range many {
		many[i] = statusEvent(int64(100+i), notify.EventSent)
	}
	confirmed, err = p.Publish(context.Background(), many)
	require.Error(t, err)
	require.Empty(t, confirmed)
	require.Contains(t, err.Error(), "not tried")
	require.Equal(t, before, len(r.requests()))
}

func TestStatusPublisherConfig(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]webhook.StatusConfig{
		"no url":      {Secret: testSecret},
		"no secret":   {URL: "https://example.com/status"},
		"credentials": {URL: "https://user:pw@example.com/status", Secret: testSecret},
		"not http":    {URL: "ftp://example.com/status", Secret: testSecret},
		"relative":    {URL: "/status", Secret: testSecret},
	} {
		_, err := webhook.NewStatusPublisher(cfg)
		require.Error(t, err, name)
		require.NotContains(t, err.Error(), "pw", name)
	}
}

// A status endpoint that hangs, throttles (429 with Retry-After) or drops
// the connection mid-request confirms nothing and never stops the relay;
// a hung one costs one request timeout, not the relay's batch deadline.
func TestStatusPublisherHungThrottledDropped(t *testing.T) {
	t.Parallel()
	r := startReceiver(t)
	p, err := webhook.NewStatusPublisher(webhook.StatusConfig{URL: r.url("/status"), Secret: testSecret, Timeout: 300 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	cases := map[string]http.HandlerFunc{
		"hung": func(_ http.ResponseWriter, req *http.Request) { <-req.Context().Done() },
		"throttled": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
		},
		"dropped": func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		},
	}
	for name, h := range cases {
		r.answer(h)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		confirmed, err := p.Publish(ctx, []notify.Event{statusEvent(1, notify.EventSent)})
		deadlineErr := ctx.Err()
		cancel()
		require.Error(t, err, name)
		require.False(t, notify.IsPermanent(err), "%s stops the relay", name)
		require.Empty(t, confirmed, name)
		require.NoError(t, deadlineErr, "%s: the publish outlived the request timeout up to the batch deadline", name)
	}
}
