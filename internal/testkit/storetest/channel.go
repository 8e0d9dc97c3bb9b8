package storetest

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// testOtherChannels: a notification of a channel other than email (no
// subject, a to far longer than an email address, a body of JSON text) is
// created, read back, carried by its outbox event and listed by channel
// exactly as given; an idempotent replay of it matches; the email rows
// beside it are unchanged.
func testOtherChannels(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	long := "https://hooks.example.com/" + strings.Repeat("p", 2000) + "?token=abc"
	reqs := []notify.CreateRequest{
		{UserID: "u-w", Channel: "webhook", To: long, Body: `{"event":"order.paid","amount":12.5,"tags":["a","b"]}`},
		{UserID: "u-t", Channel: "telegram", To: "@herald_channel", Body: "text\nwith two lines"},
		{UserID: "u-t", Channel: "telegram", To: "-1001234567890", Body: "to a chat id"},
	}
	var made []notify.Notification
	for i, req := range reqs {
		c, err := s.Create(ctx, notify.NewNotification{Request: req, IdempotencyKey: "chan-" + notify.FormatID(int64(i+1))})
		require.NoError(t, err)
		made = append(made, c.Notification)
		got := get(t, ctx, s, c.Notification.ID)
		require.Equal(t, req.Channel, got.Channel)
		require.Equal(t, req.To, got.To)
		require.Empty(t, got.Subject)
		require.Equal(t, req.Body, got.Body)

		again, err := s.Create(ctx, notify.NewNotification{Request: req, IdempotencyKey: "chan-" + notify.FormatID(int64(i+1))})
		require.NoError(t, err)
		require.True(t, again.Replayed)
		require.Equal(t, c.Notification.ID, again.Notification.ID)
	}
	email := create(t, ctx, s, 1)

	// The events carry the rows as they are, and decode (channel-neutral).
	byID := map[int64]notify.Requested{}
	for _, ev := range allEvents(t, ctx, s) {
		r, nid, err := notify.Message{ID: ev.ID, Type: ev.Type, Payload: ev.Payload}.Decode()
		require.NoError(t, err)
		byID[nid] = r
	}
	for i, n := range made {
		r := byID[n.ID]
		require.Equal(t, reqs[i].Channel, r.Channel)
		require.Equal(t, reqs[i].To, r.To)
		require.Empty(t, r.Subject)
		require.Equal(t, reqs[i].Body, r.Body)
	}
	require.Equal(t, "email", byID[email.ID].Channel)

	for _, tc := range []struct {
		f    notify.ListFilter
		want []notify.Notification
	}{
		{notify.ListFilter{Channel: "webhook"}, made[:1]},
		{notify.ListFilter{Channel: "telegram"}, made[1:]},
		{notify.ListFilter{Channel: "email"}, []notify.Notification{email}},
		{notify.ListFilter{Channel: "sms"}, nil},
		{notify.ListFilter{Channel: "telegram", UserID: "u-w"}, nil},
		{notify.ListFilter{Channel: "telegram", Status: notify.StatusPending}, made[1:]},
	} {
		for _, limit := range []int{1, 50} {
			tc.f.Limit = limit
			require.Equal(t, newestFirst(tc.want), append([]int64{}, listAll(t, ctx, s, tc.f)...), "%+v", tc.f)
		}
	}
	page, err := s.List(ctx, notify.ListFilter{Channel: "webhook", Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Items, 1)
	require.Equal(t, long, page.Items[0].To, "a listing shows the whole to")
}
