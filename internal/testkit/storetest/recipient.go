package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// recipientTests are the subtests of recipients, templates and erasure
// (issue 35, points 1 and 2).
var recipientTests = []subtest{
	{"RecipientPutGetDelete", testRecipientPutGetDelete},
	{"RecipientAddressOfAnyChannel", testRecipientAddressOfAnyChannel},
	{"RecipientGuard", testRecipientGuard},
	{"ResolvedCreate", testResolvedCreate},
	{"ResolvedReplay", testResolvedReplay},
	{"EraseRecipient", testEraseRecipient},
	{"TemplateVersions", testTemplateVersions},
	{"TemplateConcurrentPuts", testTemplateConcurrentPuts},
}

func testRecipientPutGetDelete(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	_, err := s.Recipient(ctx, "u-1")
	require.ErrorIs(t, err, notify.ErrNotFound)
	in := notify.Recipient{UserID: "u-1", Addresses: map[string]string{notify.ChannelEmail: "ada@example.com", "telegram": "-1001",
		"webhook": "https://example.com/h"}, Locale: "de-AT", TimeZone: "Europe/Vienna"}
	before := time.Now().Add(-time.Minute)
	put, err := s.PutRecipient(ctx, in)
	require.NoError(t, err)
	require.EqualValues(t, 1, put.Revision)
	require.True(t, put.UpdatedAt.After(before))
	got, err := s.Recipient(ctx, "u-1")
	require.NoError(t, err)
	require.WithinDuration(t, put.UpdatedAt, got.UpdatedAt, time.Millisecond)
	got.UpdatedAt = put.UpdatedAt
	require.Equal(t, put, got)

	// A PUT replaces the whole record: a field left out is emptied.
	put2, err := s.PutRecipient(ctx, notify.Recipient{UserID: "u-1", Addresses: map[string]string{notify.ChannelEmail: "ada@example.org", "webhook": ""}})
	require.NoError(t, err)
	require.EqualValues(t, 2, put2.Revision)
	got, err = s.Recipient(ctx, "u-1")
	require.NoError(t, err)
	require.Equal(t, map[string]string{notify.ChannelEmail: "ada@example.org"}, got.Addresses, "an empty address is none")
	require.Empty(t, got.Address("telegram"))
	require.Empty(t, got.Locale)
	require.EqualValues(t, 2, got.Revision)

	require.NoError(t, s.DeleteRecipient(ctx, "u-1"))
	_, err = s.Recipient(ctx, "u-1")
	require.ErrorIs(t, err, notify.ErrNotFound)
	require.ErrorIs(t, s.DeleteRecipient(ctx, "u-1"), notify.ErrNotFound)
}

// testRecipientAddressOfAnyChannel: the addresses are kept by channel
// name, whatever the name: a channel herald has never heard of needs no
// change of the store's schema. A recipient without any address has none.
func testRecipientAddressOfAnyChannel(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	in := notify.Recipient{UserID: "u-1", Addresses: map[string]string{"pigeon": "loft 7, perch 3", notify.ChannelEmail: "ada@example.com",
		"sms_v2": "+49 30 1234567 ☎"}}
	put, err := s.PutRecipient(ctx, in)
	require.NoError(t, err)
	require.Equal(t, in.Addresses, put.Addresses)
	got, err := s.Recipient(ctx, "u-1")
	require.NoError(t, err)
	require.Equal(t, in.Addresses, got.Addresses)
	require.Equal(t, "loft 7, perch 3", got.Address("pigeon"))

	_, err = s.PutRecipient(ctx, notify.Recipient{UserID: "u-1", Locale: "de"})
	require.NoError(t, err)
	got, err = s.Recipient(ctx, "u-1")
	require.NoError(t, err)
	require.Empty(t, got.Addresses, "a PUT replaces the addresses too")
	require.Empty(t, got.Address("pigeon"))
	require.Equal(t, "de", got.Locale)
}

// testRecipientGuard: a create that read the recipient at a revision
// commits only while the recipient is still at it; otherwise nothing is
// written.
func testRecipientGuard(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	rec, err := s.PutRecipient(ctx, notify.Recipient{UserID: "user-1", Addresses: map[string]string{notify.ChannelEmail: "ada@example.com"}})
	require.NoError(t, err)
	req := request(1)
	req.To = rec.Address(notify.ChannelEmail)
	c, err := s.Create(ctx, notify.NewNotification{Request: req, RecipientRevision: rec.Revision, Digest: "d1"})
	require.NoError(t, err)
	require.Equal(t, "ada@example.com", c.Notification.To)

	_, err = s.PutRecipient(ctx, notify.Recipient{UserID: "user-1", Addresses: map[string]string{notify.ChannelEmail: "ada@example.org"}})
	require.NoError(t, err)
	_, err = s.Create(ctx, notify.NewNotification{Request: req, RecipientRevision: rec.Revision, Digest: "d2"})
	require.ErrorIs(t, err, notify.ErrRecipientChanged)
	require.Equal(t, 1, h.Count(t, "notifications"))

	require.NoError(t, s.DeleteRecipient(ctx, "user-1"))
	_, err = s.Create(ctx, notify.NewNotification{Request: req, RecipientRevision: rec.Revision + 1, Digest: "d3"})
	require.ErrorIs(t, err, notify.ErrRecipientChanged)
	require.Equal(t, 1, h.Count(t, "notifications"))

	// The stored address is the one accepted, whatever the recipient
	// became.
	got, err := s.Get(ctx, c.Notification.ID)
	require.NoError(t, err)
	require.Equal(t, "ada@example.com", got.To)
}

// testResolvedCreate: what a templated create stores comes back from Get
// and rides in its event.
func testResolvedCreate(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	req := request(1)
	req.HTML = "<p>Hello &lt;b&gt;</p>"
	req.Template, req.TemplateVersion, req.Locale = "order_shipped", 3, "de"
	c, err := s.Create(ctx, notify.NewNotification{Request: req, Digest: "abc"})
	require.NoError(t, err)
	for _, n := range []notify.Notification{c.Notification, mustGet(t, ctx, h, c.Notification.ID)} {
		require.Equal(t, req.HTML, n.HTML)
		require.Equal(t, "order_shipped", n.Template)
		require.Equal(t, 3, n.TemplateVersion)
		require.Equal(t, "de", n.Locale)
		require.Equal(t, "abc", n.Digest)
		require.Equal(t, req.Body, n.Body)
	}
	evs := allEvents(t, ctx, s)
	require.Len(t, evs, 1)
	var p notify.Requested
	require.NoError(t, json.Unmarshal(evs[0].Payload, &p))
	require.Equal(t, req.HTML, p.HTML)
	require.Equal(t, req.Body, p.Body)

	// A plain create keeps none of it.
	plain := create(t, ctx, s, 2)
	got := mustGet(t, ctx, h, plain.ID)
	require.Empty(t, got.HTML)
	require.Empty(t, got.Template)
	require.Zero(t, got.TemplateVersion)
	require.Empty(t, got.Digest)
}

func mustGet(t *testing.T, ctx context.Context, h Harness, id int64) notify.Notification {
	t.Helper()
	n, err := h.Store.Get(ctx, id)
	require.NoError(t, err)
	return n
}

// testResolvedReplay: a replay of a resolved create compares the digest
// of the request as given, not the resolved address.
func testResolvedReplay(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	req := request(1)
	first, err := s.Create(ctx, notify.NewNotification{Request: req, IdempotencyKey: "k", Digest: "same"})
	require.NoError(t, err)
	again := req
	again.To = "moved@example.com" // the recipient changed meanwhile
	c, err := s.Create(ctx, notify.NewNotification{Request: again, IdempotencyKey: "k", Digest: "same"})
	require.NoError(t, err)
	require.True(t, c.Replayed)
	require.Equal(t, first.Notification.ID, c.Notification.ID)
	require.Equal(t, req.To, c.Notification.To)
	_, err = s.Create(ctx, notify.NewNotification{Request: req, IdempotencyKey: "k", Digest: "other"})
	require.ErrorIs(t, err, notify.ErrConflict)
	_, err = s.Create(ctx, notify.NewNotification{Request: req, IdempotencyKey: "k"})
	require.ErrorIs(t, err, notify.ErrConflict, "a plain create with the key of a resolved one")
	require.Equal(t, 1, h.Count(t, "notifications"))
}

// testEraseRecipient: an erasure deletes the recipient and empties the
// personal fields of the user's notifications, their events and their
// attempts, and nothing of anyone else's.
func testEraseRecipient(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	_, err := s.PutRecipient(ctx, notify.Recipient{UserID: "user-1", Addresses: map[string]string{notify.ChannelEmail: "ada@example.com"}})
	require.NoError(t, err)
	mine := make([]notify.Notification, 2)
	for i := range mine {
		req := request(1)
		req.To = "ada@example.com"
		req.HTML = "<p>Dear Ada</p>"
		c, err := s.Create(ctx, notify.NewNotification{Request: req})
		require.NoError(t, err)
		mine[i] = c.Notification
	}
	h.AddAttempt(t, mine[0].ID, notify.Attempt{Attempt: 1, MessageID: 99, StartedAt: time.Now().UTC(), Outcome: notify.AttemptRetry,
		Error: "550 <ada@example.com> unknown", FinishedAt: ptr(time.Now().UTC())})
	other := create(t, ctx, s, 2)

	e, err := s.EraseRecipient(ctx, "user-1")
	require.NoError(t, err)
	require.True(t, e.Recipient)
	require.EqualValues(t, 2, e.Notifications)
	require.EqualValues(t, 2, e.Events)
	require.EqualValues(t, 1, e.Attempts)
	_, err = s.Recipient(ctx, "user-1")
	require.ErrorIs(t, err, notify.ErrNotFound)
	for _, n := range mine {
		got := mustGet(t, ctx, h, n.ID)
		require.Equal(t, "user-1", got.UserID)
		require.Empty(t, got.To)
		require.Empty(t, got.Subject)
		require.Empty(t, got.Body)
		require.Empty(t, got.HTML)
		require.Equal(t, notify.StatusPending, got.Status)
	}
	for _, a := range h.Attempts(t, mine[0].ID) {
		require.Empty(t, a.Error)
	}
	evs := allEvents(t, ctx, s)
	require.Len(t, evs, 3)
	for _, ev := range evs {
		var p notify.Requested
		require.NoError(t, json.Unmarshal(ev.Payload, &p))
		if p.UserID != "user-1" {
			require.Equal(t, other.To, p.To)
			require.Equal(t, other.Body, p.Body)
			continue
		}
		require.Empty(t, p.To)
		require.Empty(t, p.Subject)
		require.Empty(t, p.Body)
		require.Empty(t, p.HTML)
	}
	got := mustGet(t, ctx, h, other.ID)
	require.Equal(t, other.To, got.To)
	require.Equal(t, other.Body, got.Body)

	// Again: nothing left to delete, the same rows emptied again.
	e, err = s.EraseRecipient(ctx, "user-1")
	require.NoError(t, err)
	require.False(t, e.Recipient)
	require.EqualValues(t, 2, e.Notifications)
}

func testTemplateVersions(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	_, err := s.Template(ctx, "order_shipped", 0)
	require.ErrorIs(t, err, notify.ErrNotFound)
	put := func(channel, locale, subject string) notify.TemplateVersion {
		t.Helper()
		v, err := s.PutTemplate(ctx, notify.TemplateVersion{Name: "order_shipped", Channel: channel, Locale: locale,
			Subject: subject, Text: "Hi {{.name}}", HTML: "<p>{{.name}}</p>"})
		require.NoError(t, err)
		return v
	}
	v1 := put("email", "", "Shipped v1")
	require.Equal(t, 1, v1.Version)
	require.False(t, v1.CreatedAt.IsZero())
	require.Equal(t, 2, put("email", "de", "Versandt").Version)
	require.Equal(t, 3, put("email", "", "Shipped v3").Version)
	require.Equal(t, 4, put("telegram", "", "").Version)
	_, err = s.PutTemplate(ctx, notify.TemplateVersion{Name: "welcome", Channel: "email", Subject: "Welcome", Text: "Hello"})
	require.NoError(t, err)

	variant := func(tpl notify.Template) []string {
		var out []string
		for _, v := range tpl.Variants {
			out = append(out, fmt.Sprintf("%s/%s/%d/%s", v.Channel, v.Locale, v.Version, v.Subject))
		}
		return out
	}
	tpl, err := s.Template(ctx, "order_shipped", 0)
	require.NoError(t, err)
	require.Equal(t, 4, tpl.Latest)
	require.Equal(t, []string{"email//3/Shipped v3", "email/de/2/Versandt", "telegram//4/"}, variant(tpl))
	require.Equal(t, "Hi {{.name}}", tpl.Variants[0].Text)
	require.Equal(t, "<p>{{.name}}</p>", tpl.Variants[0].HTML)

	tpl, err = s.Template(ctx, "order_shipped", 2)
	require.NoError(t, err)
	require.Equal(t, 4, tpl.Latest)
	require.Equal(t, []string{"email//1/Shipped v1", "email/de/2/Versandt"}, variant(tpl))
	tpl, err = s.Template(ctx, "order_shipped", 1)
	require.NoError(t, err)
	require.Equal(t, []string{"email//1/Shipped v1"}, variant(tpl))

	all, err := s.Templates(ctx)
	require.NoError(t, err)
	require.Len(t, all, 2)
	require.Equal(t, "order_shipped", all[0].Name)
	require.Equal(t, 4, all[0].Latest)
	require.Len(t, all[0].Variants, 3)
	require.Equal(t, "welcome", all[1].Name)
	require.Equal(t, 1, all[1].Latest)
}

// testTemplateConcurrentPuts: puts of one name at once each get a version
// of their own.
func testTemplateConcurrentPuts(t *testing.T, ctx context.Context, h Harness) {
	const n = 8
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seen = map[int]bool{}
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := h.Store.PutTemplate(ctx, notify.TemplateVersion{Name: "t", Channel: "email", Locale: fmt.Sprint("l", i), Subject: "s", Text: "x"})
			if !assertNoError(t, err) {
				return
			}
			mu.Lock()
			seen[v.Version] = true
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.Len(t, seen, n)
	for v := 1; v <= n; v++ {
		require.True(t, seen[v], "version %d", v)
	}
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}
