package storetest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// fallbackTests are the subtests of a create's fallback list (issue 35,
// point 5).
var fallbackTests = []subtest{
	{"FallbackOnDeadLetter", testFallbackOnDeadLetter},
	{"FallbackNotOnRetryOrSent", testFallbackNotOnRetryOrSent},
	{"FallbackOnceAfterRedrive", testFallbackOnceAfterRedrive},
	{"FallbackSuppressedHop", testFallbackSuppressedHop},
}

// withFallback is request(i) in category cat with two hops after it: a
// telegram chat, then a webhook.
func withFallback(i int, cat string) notify.NewNotification {
	nn := notify.NewNotification{Request: request(i)}
	nn.Request.Category = cat
	nn.Fallback = []notify.Hop{
		{Channel: "telegram", To: "4242", Body: "Hello on telegram", CheckPreference: cat != ""},
		{Channel: "webhook", To: "https://hooks.example.com/u", Body: `{"hello":"webhook"}`, Destination: "https://hooks.example.com", CheckPreference: cat != ""},
	}
	return nn
}

// requestedFor returns the payload of the unprocessed
// notification.requested event of notification id (relaying it).
func requestedFor(t *testing.T, ctx context.Context, h Harness, id int64) notify.Requested {
	t.Helper()
	var got []notify.Requested
	for _, e := range relayed(t, ctx, h.Store, requestedOnly, true) {
		var r notify.Requested
		require.NoError(t, json.Unmarshal(e.Payload, &r))
		if r.NotificationID == notify.FormatID(id) {
			got = append(got, r)
		}
	}
	require.Len(t, got, 1, "one notification.requested event of notification %d", id)
	return got[0]
}

// testFallbackOnDeadLetter: the notification keeps its hops; its dead
// letter creates the first as a notification of its own (its address and
// content, the first's user, category and priority), with its
// notification.requested event, linked both ways; the hop's dead letter
// creates the next, linked to the first of the chain; the last one's
// dead letter creates nothing.
func testFallbackOnDeadLetter(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	nn := withFallback(1, "orders")
	nn.Request.Priority = notify.PriorityHigh
	first := createNew(t, ctx, s, nn)
	require.Equal(t, []string{"telegram", "webhook"}, notify.HopChannels(first.Fallback))
	got := get(t, ctx, s, first.ID)
	require.Equal(t, nn.Fallback, got.Fallback, "the hops are stored as resolved")
	require.Zero(t, got.FallbackOf)
	require.Zero(t, got.FallbackNext)
	requestedFor(t, ctx, h, first.ID)

	got = deadLetter(t, ctx, s, 101, first, "550 gone")
	require.NotZero(t, got.FallbackNext, "the dead letter made its hop")
	hop := get(t, ctx, s, got.FallbackNext)
	require.Equal(t, notify.StatusPending, hop.Status)
	require.Equal(t, "telegram", hop.Channel)
	require.Equal(t, "4242", hop.To)
	require.Equal(t, "Hello on telegram", hop.Body)
	require.Equal(t, first.UserID, hop.UserID)
	require.Equal(t, "orders", hop.Category)
	require.Equal(t, notify.PriorityHigh, hop.Priority)
	require.Equal(t, first.ID, hop.FallbackOf)
	require.Equal(t, []string{"webhook"}, notify.HopChannels(hop.Fallback))
	r := requestedFor(t, ctx, h, hop.ID)
	require.Equal(t, "telegram", r.Channel)
	require.Equal(t, "4242", r.To)

	hop = deadLetter(t, ctx, s, 102, hop, "550 gone")
	require.NotZero(t, hop.FallbackNext)
	last := get(t, ctx, s, hop.FallbackNext)
	require.Equal(t, "webhook", last.Channel)
	require.Equal(t, notify.StatusPending, last.Status)
	require.Equal(t, first.ID, last.FallbackOf, "every hop names the first of the chain")
	require.Empty(t, last.Fallback)
	requestedFor(t, ctx, h, last.ID)

	last = deadLetter(t, ctx, s, 103, last, "550 gone")
	require.Zero(t, last.FallbackNext, "the chain ends")
	require.Equal(t, 3, h.Count(t, "notifications"))
}

// testFallbackNotOnRetryOrSent: a retry, and a sent notification, make
// no hop.
func testFallbackNotOnRetryOrSent(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := createNew(t, ctx, s, withFallback(1, ""))
	attemptOnce(t, ctx, s, 201, 0, n.ID, notify.AttemptRetry, "421 later")
	attemptOnce(t, ctx, s, 201, 1, n.ID, notify.AttemptSent, "")
	got := get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusSent, got.Status)
	require.Zero(t, got.FallbackNext)
	require.Equal(t, 1, h.Count(t, "notifications"))
}

// testFallbackOnceAfterRedrive: a dead letter that made its hop, redriven
// and dead-lettered again, makes no second hop.
func testFallbackOnceAfterRedrive(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := createNew(t, ctx, s, withFallback(1, ""))
	hopID := deadLetter(t, ctx, s, 301, n, "550 gone").FallbackNext
	require.NotZero(t, hopID)
	ok, err := s.Redrive(ctx, n.ID)
	require.NoError(t, err)
	require.True(t, ok)
	got := deadLetter(t, ctx, s, 302, n, "550 gone")
	require.Equal(t, hopID, got.FallbackNext)
	require.Equal(t, 2, h.Count(t, "notifications"))
}

// testFallbackSuppressedHop: a hop whose channel its recipient opted out
// of since the create is made suppressed, and hands on to the next at
// once.
func testFallbackSuppressedHop(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := createNew(t, ctx, s, withFallback(1, "news"))
	require.NoError(t, s.PutPreferences(ctx, n.UserID, notify.Preferences{"news": {"telegram": false}}))
	got := deadLetter(t, ctx, s, 401, n, "550 gone")
	sup := get(t, ctx, s, got.FallbackNext)
	require.Equal(t, "telegram", sup.Channel)
	require.Equal(t, notify.StatusSuppressed, sup.Status)
	require.NotZero(t, sup.FallbackNext, "a suppressed hop hands on")
	next := get(t, ctx, s, sup.FallbackNext)
	require.Equal(t, "webhook", next.Channel)
	require.Equal(t, notify.StatusPending, next.Status)
	require.Equal(t, n.ID, next.FallbackOf)
	requestedFor(t, ctx, h, next.ID)
}
