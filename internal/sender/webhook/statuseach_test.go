package webhook_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// PublishEach answers for each event on its own, marked the way the
// webhook channel marks a send: 2xx nil; a 4xx but 408 and 429 permanent;
// a 5xx and a 408 a plain (retryable) failure; a 429 throttled with its
// Retry-After, and the others of the batch still sent. A receiver that is
// down fails every event as SenderDown, the rest of the batch untried.
func TestStatusPublisherPublishEach(t *testing.T) {
	t.Parallel()
	r := startReceiver(t)
	p := newStatusPublisher(t, r.url("/status"))
	codes := map[string]int{"evt_1": http.StatusOK, "evt_2": http.StatusBadRequest, "evt_3": http.StatusInternalServerError,
		"evt_4": http.StatusRequestTimeout, "evt_5": http.StatusTooManyRequests, "evt_6": http.StatusNoContent, "evt_7": http.StatusGone}
	r.answer(func(w http.ResponseWriter, req *http.Request) {
		code := codes[req.Header.Get("webhook-id")]
		if code == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "7")
		}
		w.WriteHeader(code)
	})
	evs := make([]notify.Event, 7)
	for i := range evs {
		evs[i] = statusEvent(int64(i+1), notify.EventSent)
	}
	// The 429 comes first: it must not stop the others.
	evs[0], evs[4] = evs[4], evs[0]
	errs := p.PublishEach(t.Context(), evs)
	require.Len(t, errs, len(evs))
	byID := map[int64]error{}
	for i, e := range evs {
		byID[e.ID] = errs[i]
	}
	require.NoError(t, byID[1])
	require.NoError(t, byID[6])
	for _, id := range []int64{2, 7} {
		require.True(t, notify.IsPermanent(byID[id]), "event %d: %v", id, byID[id])
	}
	for _, id := range []int64{3, 4} {
		require.Error(t, byID[id])
		require.False(t, notify.IsPermanent(byID[id]), "event %d", id)
		_, throttled := notify.IsThrottled(byID[id])
		require.False(t, throttled, "event %d", id)
		require.False(t, notify.IsSenderDown(byID[id]), "event %d", id)
	}
	after, throttled := notify.IsThrottled(byID[5])
	require.True(t, throttled)
	require.Equal(t, 7*time.Second, after)
	require.Len(t, r.requests(), len(evs), "every event tried")

	// Down: every event fails as the endpoint's outage, none as its own.
	r.srv.Close()
	// Not over a kept connection the server dropped: that failure comes
	// during a request, as the message's (webhook.go tells them apart).
	require.NoError(t, p.Close())
	before := len(r.requests())
	errs = p.PublishEach(context.Background(), evs)
	for i, err := range errs {
		require.True(t, notify.IsSenderDown(err), "event %d: %v", evs[i].ID, err)
		require.False(t, notify.IsPermanent(err))
	}
	require.Equal(t, before, len(r.requests()))
}
