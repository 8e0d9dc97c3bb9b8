package storetest

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// batchTests are the subtests of CreateBatch.
var batchTests = []subtest{
	{"BatchCreate", testBatchCreate},
	{"BatchIdempotency", testBatchIdempotency},
	{"BatchKeyTwice", testBatchKeyTwice},
	{"BatchInjectedFault", testBatchInjectedFault},
	{"BatchFull", testBatchFull},
	{"BatchKeyRace", testBatchKeyRace},
	{"BatchKeyExpired", testBatchKeyExpired},
	{"BatchResolved", testBatchResolved},
	{"BatchRecipientChanged", testBatchRecipientChanged},
}

// batchOf returns n distinct create requests, from request(first) on.
func batchOf(first, n int) []notify.NewNotification {
	nns := make([]notify.NewNotification, n)
	for i := range nns {
		nns[i] = notify.NewNotification{Request: request(first + i)}
	}
	return nns
}

// A batch writes each notification with its event, answers in the
// requests' order, and the notifications are those a single create makes.
func testBatchCreate(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	nns := batchOf(1, 5)
	nns[2].IdempotencyKey = "k-2" // a key amid keyless requests
	out, err := s.CreateBatch(ctx, nns)
	require.NoError(t, err)
	require.Len(t, out, 5)
	seen := map[int64]bool{}
	var prev int64
	for i, r := range out {
		require.NoError(t, r.Err, "request %d", i)
		require.False(t, r.Created.Replayed)
		n := r.Created.Notification
		require.Equal(t, nns[i].Request.Subject, n.Subject, "result %d answers request %d", i, i)
		require.Equal(t, notify.StatusPending, n.Status)
		require.False(t, seen[n.ID])
		seen[n.ID] = true
		require.Greater(t, n.ID, prev, "ids follow the requests' order")
		prev = n.ID
		got := get(t, ctx, s, n.ID)
		require.Equal(t, nns[i].Request.UserID, got.UserID)
		require.Equal(t, nns[i].Request.Body, got.Body)
		require.Equal(t, nns[i].IdempotencyKey, got.IdempotencyKey)
	}
	require.Equal(t, 5, h.Count(t, "notifications"))
	require.Equal(t, 5, h.Count(t, "outbox"))
	evs := allEvents(t, ctx, s)
	require.Len(t, evs, 5)
	for i, e := range evs {
		var req notify.Requested
		require.NoError(t, json.Unmarshal(e.Payload, &req))
		require.Equal(t, notify.FormatID(out[i].Created.Notification.ID), req.NotificationID, "event %d is its notification's", i)
		require.Equal(t, nns[i].Request.To, req.To)
	}
}

// Keys in a batch behave as on single creates: a key used before replays
// with the same request and conflicts with another, and only that request
// fails.
func testBatchIdempotency(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	first, err := s.Create(ctx, notify.NewNotification{Request: request(1), IdempotencyKey: "k"})
	require.NoError(t, err)
	other := request(1)
	other.Subject = "another subject"
	out, err := s.CreateBatch(ctx, []notify.NewNotification{
		{Request: request(1), IdempotencyKey: "k"},
		{Request: request(2)},
		{Request: other, IdempotencyKey: "k"},
		{Request: request(3), IdempotencyKey: "k"}, // another user: another key
	})
	require.NoError(t, err)
	require.Len(t, out, 4)
	require.NoError(t, out[0].Err)
	require.True(t, out[0].Created.Replayed)
	require.Equal(t, first.Notification.ID, out[0].Created.Notification.ID)
	require.NoError(t, out[1].Err)
	require.False(t, out[1].Created.Replayed)
	require.ErrorIs(t, out[2].Err, notify.ErrConflict)
	require.NoError(t, out[3].Err)
	require.False(t, out[3].Created.Replayed)
	require.Equal(t, 3, h.Count(t, "notifications"))
	require.Equal(t, 3, h.Count(t, "outbox"))

	// The same batch again writes nothing new.
	again, err := s.CreateBatch(ctx, []notify.NewNotification{{Request: request(1), IdempotencyKey: "k"}, {Request: request(3), IdempotencyKey: "k"}})
	require.NoError(t, err)
	require.True(t, again[0].Created.Replayed)
	require.True(t, again[1].Created.Replayed)
	require.Equal(t, out[3].Created.Notification.ID, again[1].Created.Notification.ID)
	require.Equal(t, 3, h.Count(t, "outbox"))
}

// A key given twice in one batch: the second request is answered as a
// repeat of the first (replayed), or conflicts when it differs.
func testBatchKeyTwice(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	other := request(1)
	other.Body = "another body"
	out, err := s.CreateBatch(ctx, []notify.NewNotification{
		{Request: request(1), IdempotencyKey: "twice"},
		{Request: request(1), IdempotencyKey: "twice"},
		{Request: other, IdempotencyKey: "twice"},
	})
	require.NoError(t, err)
	require.NoError(t, out[0].Err)
	require.False(t, out[0].Created.Replayed)
	require.NoError(t, out[1].Err)
	require.True(t, out[1].Created.Replayed)
	require.Equal(t, out[0].Created.Notification.ID, out[1].Created.Notification.ID)
	require.ErrorIs(t, out[2].Err, notify.ErrConflict)
	require.Equal(t, 1, h.Count(t, "notifications"))
	require.Equal(t, 1, h.Count(t, "outbox"))
}

// The debug fault fails the whole batch and writes nothing, keys included.
func testBatchInjectedFault(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	nns := batchOf(1, 4)
	nns[1].IdempotencyKey = "fault-key"
	for i := range nns {
		nns[i].Fault = notify.FaultAfterOutboxInsert
	}
	_, err := s.CreateBatch(ctx, nns)
	require.ErrorIs(t, err, notify.ErrInjectedFault)
	requireFaultKeptNothing(t, ctx, h, notify.NewNotification{Request: request(9), IdempotencyKey: "fault-key"})
}

// A batch of the most the API takes is written whole, and the relay sees
// every event.
func testBatchFull(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	nns := batchOf(1, notify.MaxBatch)
	for i := 0; i < len(nns); i += 100 {
		nns[i].IdempotencyKey = "full-" + notify.FormatID(int64(i))
	}
	out, err := s.CreateBatch(ctx, nns)
	require.NoError(t, err)
	require.Len(t, out, notify.MaxBatch)
	ids := map[int64]bool{}
	for i, r := range out {
		require.NoError(t, r.Err)
		require.Equal(t, nns[i].Request.Subject, r.Created.Notification.Subject)
		ids[r.Created.Notification.ID] = true
	}
	require.Len(t, ids, notify.MaxBatch)
	require.Equal(t, notify.MaxBatch, h.Count(t, "notifications"))
	require.Equal(t, notify.MaxBatch, h.Count(t, "outbox"))
	require.EqualValues(t, notify.MaxBatch, unprocessed(t, ctx, s))
}

// Batches sent at once with the same keys (a client's retry racing its
// first try) make one notification per key, and every batch answers it.
func testBatchKeyRace(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	const racers = 4
	nns := batchOf(1, 100)
	for i := range nns {
		nns[i].IdempotencyKey = "race-" + notify.FormatID(int64(i))
	}
	outs := make([][]notify.BatchResult, racers)
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for r := range racers {
		wg.Go(func() { outs[r], errs[r] = s.CreateBatch(ctx, nns) })
	}
	wg.Wait()
	created := 0
	for r := range racers {
		require.NoError(t, errs[r], "batch %d", r)
		for i, res := range outs[r] {
			require.NoError(t, res.Err)
			require.Equal(t, outs[0][i].Created.Notification.ID, res.Created.Notification.ID, "batch %d, request %d", r, i)
			if !res.Created.Replayed {
				created++
			}
		}
	}
	require.Equal(t, len(nns), created, "each key created once")
	require.Equal(t, len(nns), h.Count(t, "notifications"))
	require.Equal(t, len(nns), h.Count(t, "outbox"))
}

// A key whose notification is older than the window is free: the batch
// makes a new notification with it, as a single create does.
func testBatchKeyExpired(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	old, err := s.Create(ctx, notify.NewNotification{Request: request(1), IdempotencyKey: "daily"})
	require.NoError(t, err)
	h.Backdate(t, old.Notification.ID, notify.IdempotencyWindow+time.Hour)
	out, err := s.CreateBatch(ctx, []notify.NewNotification{{Request: request(1), IdempotencyKey: "daily"}, {Request: request(1), IdempotencyKey: "daily"}})
	require.NoError(t, err)
	require.False(t, out[0].Created.Replayed)
	require.NotEqual(t, old.Notification.ID, out[0].Created.Notification.ID)
	require.True(t, out[1].Created.Replayed)
	require.Equal(t, out[0].Created.Notification.ID, out[1].Created.Notification.ID)
	require.Equal(t, 2, h.Count(t, "notifications"))
}

// A batch may mix plain creates with resolved ones (a recipient's
// revision, a template's parts, a category to check): each is stored as a
// single create stores it, a suppressed one with no requested event, and
// the ids follow the requests' order.
func testBatchResolved(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	rec, err := s.PutRecipient(ctx, notify.Recipient{UserID: "user-2", Addresses: map[string]string{notify.ChannelEmail: "ada@example.com"}})
	require.NoError(t, err)
	require.NoError(t, s.PutPreferences(ctx, "user-3", notify.Preferences{"news": {"email": false}}))
	nns := batchOf(1, 4)
	templated := &nns[1]
	templated.Request.To = rec.Address(notify.ChannelEmail)
	templated.Request.HTML = "<p>Hello</p>"
	templated.Request.Template, templated.Request.TemplateVersion, templated.Request.Locale = "welcome", 2, "de"
	templated.RecipientRevision, templated.Digest = rec.Revision, "digest-2"
	nns[2] = categorized(3, "news")
	nns[3].Request.Category, nns[3].CheckPreference = "news", true // user-4 did not opt out
	out, err := s.CreateBatch(ctx, nns)
	require.NoError(t, err)
	require.Len(t, out, 4)
	var prev int64
	for i, r := range out {
		require.NoError(t, r.Err, "request %d", i)
		require.Greater(t, r.Created.Notification.ID, prev, "ids follow the requests' order")
		prev = r.Created.Notification.ID
	}
	want := []notify.Status{notify.StatusPending, notify.StatusPending, notify.StatusSuppressed, notify.StatusPending}
	for i, r := range out {
		require.Equal(t, want[i], r.Created.Notification.Status, "request %d", i)
		require.Equal(t, want[i], mustGet(t, ctx, h, r.Created.Notification.ID).Status, "request %d", i)
	}
	got := mustGet(t, ctx, h, out[1].Created.Notification.ID)
	require.Equal(t, "ada@example.com", got.To)
	require.Equal(t, "<p>Hello</p>", got.HTML)
	require.Equal(t, "welcome", got.Template)
	require.Equal(t, 2, got.TemplateVersion)
	require.Equal(t, "de", got.Locale)
	require.Equal(t, "digest-2", got.Digest)
	require.Equal(t, "news", mustGet(t, ctx, h, out[3].Created.Notification.ID).Category)

	var requested []string
	for _, e := range allEvents(t, ctx, s) {
		if e.Type != notify.EventRequested {
			continue
		}
		var p notify.Requested
		require.NoError(t, json.Unmarshal(e.Payload, &p))
		requested = append(requested, p.NotificationID)
	}
	require.ElementsMatch(t, []string{notify.FormatID(out[0].Created.Notification.ID), notify.FormatID(out[1].Created.Notification.ID),
		notify.FormatID(out[3].Created.Notification.ID)}, requested, "the suppressed one has no requested event")
}

// A batch with a request whose recipient changed since it was read fails
// with notify.ErrRecipientChanged and writes nothing, not even its plain
// requests: the API resolves the batch again and sends it whole.
func testBatchRecipientChanged(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	rec, err := s.PutRecipient(ctx, notify.Recipient{UserID: "user-2", Addresses: map[string]string{notify.ChannelEmail: "ada@example.com"}})
	require.NoError(t, err)
	_, err = s.PutRecipient(ctx, notify.Recipient{UserID: "user-2", Addresses: map[string]string{notify.ChannelEmail: "ada@example.org"}})
	require.NoError(t, err)
	nns := batchOf(1, 3)
	nns[1].Request.To = rec.Address(notify.ChannelEmail)
	nns[1].RecipientRevision, nns[1].Digest = rec.Revision, "digest-2"
	_, err = s.CreateBatch(ctx, nns)
	require.ErrorIs(t, err, notify.ErrRecipientChanged)
	require.Equal(t, 0, h.Count(t, "notifications"))
	require.Equal(t, 0, h.Count(t, "outbox"))
}
