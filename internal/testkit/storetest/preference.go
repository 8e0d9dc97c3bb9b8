package storetest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// preferenceTests are the subtests of categories and preferences (issue
// 35, point 3).
var preferenceTests = []subtest{
	{"PreferencesPutGet", testPreferencesPutGet},
	{"SuppressedCreate", testSuppressedCreate},
	{"SuppressedFault", testSuppressedFault},
	{"SuppressedReplay", testSuppressedReplay},
	{"SuppressedNoStatusEvents", testSuppressedNoStatusEvents},
	{"UnsubscribeStored", testUnsubscribeStored},
}

func testPreferencesPutGet(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	p, err := s.Preferences(ctx, "u-1")
	require.NoError(t, err)
	require.Empty(t, p)

	in := notify.Preferences{"news": {"email": false, "telegram": true}, "digest": {"email": false}}
	require.NoError(t, s.PutPreferences(ctx, "u-1", in))
	got, err := s.Preferences(ctx, "u-1")
	require.NoError(t, err)
	require.Equal(t, in, got)
	other, err := s.Preferences(ctx, "u-2")
	require.NoError(t, err)
	require.Empty(t, other, "another user's preferences are their own")

	// A PUT replaces the whole set: what it leaves out is gone.
	require.NoError(t, s.PutPreferences(ctx, "u-1", notify.Preferences{"news": {"email": true}}))
	got, err = s.Preferences(ctx, "u-1")
	require.NoError(t, err)
	require.Equal(t, notify.Preferences{"news": {"email": true}}, got)

	// One preference (a link's) leaves the others as they are.
	require.NoError(t, s.SetPreference(ctx, "u-1", "digest", "email", false))
	require.NoError(t, s.SetPreference(ctx, "u-1", "news", "email", false))
	got, err = s.Preferences(ctx, "u-1")
	require.NoError(t, err)
	require.Equal(t, notify.Preferences{"news": {"email": false}, "digest": {"email": false}}, got)

	require.NoError(t, s.PutPreferences(ctx, "u-1", notify.Preferences{}))
	got, err = s.Preferences(ctx, "u-1")
	require.NoError(t, err)
	require.Empty(t, got)
}

// categorized is request(i) in category cat, asking for the preference
// check.
func categorized(i int, cat string) notify.NewNotification {
	r := request(i)
	r.Category = cat
	return notify.NewNotification{Request: r, CheckPreference: true}
}

// testSuppressedCreate: a create of a category its user opted out of on
// its channel is stored suppressed with its notification.suppressed
// status event, and nothing a relay of the notifications or the table
// claim takes; the same user's other categories and channels, and a
// create that does not ask for the check (a required category), go as
// usual.
func testSuppressedCreate(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	require.NoError(t, s.PutPreferences(ctx, "user-1", notify.Preferences{"news": {"email": false, "telegram": true}}))

	sup := createNew(t, ctx, s, categorized(1, "news"))
	require.Equal(t, notify.StatusSuppressed, sup.Status)
	require.Equal(t, "news", sup.Category)
	got := get(t, ctx, s, sup.ID)
	require.Equal(t, notify.StatusSuppressed, got.Status)
	require.Equal(t, "news", got.Category)
	require.Equal(t, "someone@example.com", got.To)

	other, err := s.Create(ctx, categorized(1, "billing"))
	require.NoError(t, err)
	require.Equal(t, notify.StatusPending, other.Notification.Status)
	required := categorized(1, "news")
	required.CheckPreference = false
	req, err := s.Create(ctx, required)
	require.NoError(t, err)
	require.Equal(t, notify.StatusPending, req.Notification.Status, "a create without the check is never suppressed")
	someoneElse, err := s.Create(ctx, categorized(2, "news"))
	require.NoError(t, err)
	require.Equal(t, notify.StatusPending, someoneElse.Notification.Status)

	p, err := s.List(ctx, notify.ListFilter{Status: notify.StatusSuppressed, Limit: 10})
	require.NoError(t, err)
	require.Len(t, p.Items, 1)
	require.Equal(t, sup.ID, p.Items[0].ID)
	require.Equal(t, "news", p.Items[0].Category)

	claimed, err := s.Claim(ctx, "w", 10, time.Minute)
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{other.Notification.ID, req.Notification.ID, someoneElse.Notification.ID}, claimedIDs(t, claimed),
		"the table claim takes the pending ones only")
	require.Empty(t, relayIDs(t, ctx, s, requestedOnly), "the claim took the others")

	evs := statusEvents(t, ctx, s)
	require.Len(t, evs, 1)
	require.Equal(t, notify.FormatID(sup.ID), evs[0].NotificationID)
	require.Equal(t, "suppressed", evs[0].Status)
	require.Equal(t, "user-1", evs[0].UserID)
	require.Equal(t, "email", evs[0].Channel)
	require.Zero(t, evs[0].Attempts)
}

// testSuppressedFault: the injected fault undoes a suppressed create as
// any other: nothing is written.
func testSuppressedFault(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	require.NoError(t, s.PutPreferences(ctx, "user-1", notify.Preferences{"news": {"email": false}}))
	before := h.Count(t, "notifications")
	nn := categorized(1, "news")
	nn.Fault = notify.FaultAfterOutboxInsert
	_, err := s.Create(ctx, nn)
	require.ErrorIs(t, err, notify.ErrInjectedFault)
	require.Equal(t, before, h.Count(t, "notifications"))
	require.Empty(t, statusEvents(t, ctx, s))
}

// testSuppressedReplay: a suppressed create replays as itself under its
// idempotency key, even after the user opted back in; the same key with
// another category is a conflict.
func testSuppressedReplay(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	require.NoError(t, s.PutPreferences(ctx, "user-1", notify.Preferences{"news": {"email": false}}))
	nn := categorized(1, "news")
	nn.IdempotencyKey = "k-1"
	first, err := s.Create(ctx, nn)
	require.NoError(t, err)
	require.Equal(t, notify.StatusSuppressed, first.Notification.Status)

	require.NoError(t, s.PutPreferences(ctx, "user-1", notify.Preferences{}))
	again, err := s.Create(ctx, nn)
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, first.Notification.ID, again.Notification.ID)
	require.Equal(t, notify.StatusSuppressed, again.Notification.Status)

	other := categorized(1, "billing")
	other.IdempotencyKey = "k-1"
	_, err = s.Create(ctx, other)
	require.ErrorIs(t, err, notify.ErrConflict)
	require.Equal(t, 1, h.Count(t, "notifications"))
}

// testSuppressedNoStatusEvents: with status events off, a suppressed
// create writes no outbox row at all (nobody would ever take it).
func testSuppressedNoStatusEvents(t *testing.T, ctx context.Context, h Harness) {
	q := h.NoStatusEvents(t)
	require.NoError(t, q.Store.PutPreferences(ctx, "user-1", notify.Preferences{"news": {"email": false}}))
	c, err := q.Store.Create(ctx, categorized(1, "news"))
	require.NoError(t, err)
	require.Equal(t, notify.StatusSuppressed, c.Notification.Status)
	got := get(t, ctx, q.Store, c.Notification.ID)
	require.Equal(t, notify.StatusSuppressed, got.Status)
	require.Empty(t, statusEvents(t, ctx, q.Store))
	require.Empty(t, relayIDs(t, ctx, q.Store, nil))
	st, err := q.Store.OutboxStats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Unprocessed, "an outbox row was left for nobody")
}

// testUnsubscribeStored: an email's one-click unsubscribe URL, rendered at
// create, is stored with the notification and carried by its
// notification.requested event, so that every attempt (and a redrive)
// sends the same header.
func testUnsubscribeStored(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	nn := categorized(1, "news")
	nn.Request.Unsubscribe = "https://herald.example.com/unsubscribe/abc.def"
	c, err := s.Create(ctx, nn)
	require.NoError(t, err)
	require.Equal(t, nn.Request.Unsubscribe, c.Notification.Unsubscribe)
	got := get(t, ctx, s, c.Notification.ID)
	require.Equal(t, nn.Request.Unsubscribe, got.Unsubscribe)
	var payloads []notify.Requested
	for _, e := range relayed(t, ctx, s, requestedOnly, true) {
		var r notify.Requested
		require.NoError(t, json.Unmarshal(e.Payload, &r))
		payloads = append(payloads, r)
	}
	require.Len(t, payloads, 1)
	require.Equal(t, nn.Request.Unsubscribe, payloads[0].Unsubscribe)
	require.Equal(t, nn.Request.Unsubscribe, notify.NewOutgoing(payloads[0]).Unsubscribe)
}
