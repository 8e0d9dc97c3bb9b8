// Package storetest is the conformance suite every store engine runs: the
// same subtests prove the same guarantees on PostgreSQL and on SQLite, so the
// api, relay, worker and table transport can rely on one behaviour whatever
// the engine.
//
// An engine's test calls Run with a function that returns a Harness on a
// fresh, empty, migrated database:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storetest.Harness {
//			s := openMigrated(t) // closed by t.Cleanup
//			return storetest.Harness{Store: s, Count: countRows(s)}
//		})
//	}
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/testkit/deliverytest"
)

// Harness is one engine's store under test, with what the suite needs to
// look at rows the methods above cannot show.
type Harness struct {
	// Store is migrated, on a database of its own that no other test uses,
	// and is closed (and the database removed) by t.Cleanup.
	Store Store
	// Count returns the number of rows in a table: "notifications",
	// "outbox" or "processed_messages". Required.
	Count func(t testing.TB, table string) int
	// SingleWriter is true for an engine whose write transactions run one at
	// a time (SQLite). The concurrency subtests then accept that two
	// transactions serialize instead of overlapping; they still require
	// that the two never see the same rows.
	SingleWriter bool
	// AddAttempt writes a delivery_attempts row for a notification with
	// the engine's own SQL, for the subtests of the attempts history.
	// Required.
	AddAttempt func(t testing.TB, notificationID int64, a notify.Attempt)
	// Attempts returns the delivery_attempts rows of a notification in id
	// order, read straight from the table. Required.
	Attempts func(t testing.TB, notificationID int64) []notify.Attempt
	// Backdate moves a notification's created_at back by d, with the
	// engine's own write, for the subtests of idempotency keys that
	// expire. Required.
	Backdate func(t testing.TB, notificationID int64, d time.Duration)
	// NoStatusEvents returns another Harness, on a fresh database of its
	// own like this one's, whose store was opened with the engine's option
	// to write no status events, for the subtest of that option. Required.
	NoStatusEvents func(t *testing.T) Harness
}

// Run runs the suite. newStore is called once per subtest, so subtests run in
// parallel on separate databases.
func Run(t *testing.T, newStore func(t *testing.T) Harness) {
	t.Helper()
	setup := func(t *testing.T) (context.Context, Harness) {
		t.Helper()
		t.Parallel()
		h := newStore(t)
		require.NotNil(t, h.Store, "Harness.Store")
		require.NotNil(t, h.Count, "Harness.Count")
		require.NotNil(t, h.Attempts, "Harness.Attempts")
		require.NotNil(t, h.Backdate, "Harness.Backdate")
		require.NotNil(t, h.NoStatusEvents, "Harness.NoStatusEvents")
		// A hang guard, not a measure: on FerretDB (over PostgreSQL,
		// the mongo engine's test server) under a loaded make test, the
		// 20 rounds of CancelRacesClaim took 61 s.
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		t.Cleanup(cancel)
		return ctx, h
	}
	for _, tc := range append([]subtest{
		{"Ping", testPing},
		{"CreateGet", testCreateGet},
		{"GetNotFound", testGetNotFound},
		{"IdempotentReplay", testIdempotentReplay},
		{"IdempotencyConflict", testIdempotencyConflict},
		{"IdempotencyScopedToUser", testIdempotencyScopedToUser},
		{"IdempotencyExpires", testIdempotencyExpires},
		{"IdempotencyRacers", testIdempotencyRacers},
		{"InjectedFault", testInjectedFault},
		{"MigrateTwice", testMigrateTwice},
		{"RelayBatchEvents", testRelayBatchEvents},
		{"RelayBatchPartial", testRelayBatchPartial},
		{"RelayBatchPublishError", testRelayBatchPublishError},
		{"RelayBatchConcurrent", testRelayBatchConcurrent},
		{"RelayBatchHoldsNothing", testRelayBatchHoldsNothing},
		{"RelayBatchLeaseExpires", testRelayBatchLeaseExpires},
		{"Subscribe", testSubscribe},
		{"DeliverOnce", testDeliverOnce},
		{"DeliverSendError", testDeliverSendError},
		{"DeliverAlreadySent", testDeliverAlreadySent},
		{"DeliverMissing", testDeliverMissing},
		{"DeliverConcurrent", testDeliverConcurrent},
		{"RecordFailureTransient", testRecordFailureTransient},
		{"RecordFailureDead", testRecordFailureDead},
		{"RecordFailureNotPending", testRecordFailureNotPending},
		{"ClaimLease", testClaimLease},
		{"ClaimExpiredLease", testClaimExpiredLease},
		{"ClaimDueOrder", testClaimDueOrder},
		{"Reschedule", testReschedule},
		{"FinishDeadLetter", testFinishDeadLetter},
		{"FinishMany", testFinishMany},
		{"OutboxStats", testOutboxStats},
		{"DeadLetters", testDeadLetters},
		{"DeadLettersFilter", testDeadLettersFilter},
		{"DeadLettersPaging", testDeadLettersPaging},
		{"RedriveFailed", testRedriveFailed},
		{"RedriveNotFailed", testRedriveNotFailed},
		{"Prune", testPrune},
		{"PruneOlderThan", testPruneOlderThan},
		{"Reconcile", testReconcile},
		{"ReconcileLimit", testReconcileLimit},
		{"ReconcileWaitsForRetryAndClaim", testReconcileWaitsForRetryAndClaim},
		{"ReconcileLeavesFailingDestinations", testReconcileLeavesFailingDestinations},
		{"ReconcileStaleFailingRecord", testReconcileStaleFailingRecord},
		{"List", testList}, {"ListFilters", testListFilters}, {"ListTimeWindow", testListTimeWindow},
		{"ListConcurrentInserts", testListConcurrentInserts}, {"Attempts", testAttempts},
		{"Activity", testActivity},
		{"OtherChannels", testOtherChannels},
		{"Traceparent", testTraceparent},
	}, append(append(append(append(append(append(append(append(deliverTests, staleCopyTests...), statusTests...), destinationTests...), deploymentTests...), deferralTests...), batchTests...), timingTests...), append(append(append(priorityTests, recipientTests...), preferenceTests...), fallbackTests...)...)...) {
		t.Run(tc.name, func(t *testing.T) {
			ctx, h := setup(t)
			tc.fn(t, ctx, h)
		})
	}
}

type subtest struct {
	name string
	fn   func(t *testing.T, ctx context.Context, h Harness)
}

// wait is how long the suite polls for something asynchronous.
const wait = 10 * time.Second

// request returns a valid create request; i makes it distinct.
func request(i int) notify.CreateRequest {
	return notify.CreateRequest{
		UserID:  "user-" + notify.FormatID(int64(i)),
		Channel: notify.ChannelEmail,
		To:      "someone@example.com",
		Subject: "Hello " + notify.FormatID(int64(i)),
		Body:    "Body line one\nline two",
	}
}

// create creates request(i).
func create(t *testing.T, ctx context.Context, s Store, i int) notify.Notification {
	t.Helper()
	return createNew(t, ctx, s, notify.NewNotification{Request: request(i)})
}

// createNew creates nn, which must be new (no replay), and returns the
// stored notification.
func createNew(t *testing.T, ctx context.Context, s Store, nn notify.NewNotification) notify.Notification {
	t.Helper()
	c, err := s.Create(ctx, nn)
	require.NoError(t, err)
	require.False(t, c.Replayed)
	return c.Notification
}

// unprocessed counts the unprocessed rows: the backlog (due) and the
// rows not due (scheduled, waiting out a retry, or leased).
func unprocessed(t *testing.T, ctx context.Context, s Store) int64 {
	t.Helper()
	st, err := s.OutboxStats(ctx)
	require.NoError(t, err)
	return st.Unprocessed + st.Scheduled
}

// requestedOnly selects the notification.requested events, the ones a
// worker delivers.
var requestedOnly = []string{notify.EventRequested}

// allEvents relays nothing: it returns the unprocessed
// notification.requested events in id order by claiming them and
// confirming none.
func allEvents(t *testing.T, ctx context.Context, s Store) []notify.Event {
	t.Helper()
	return relayed(t, ctx, s, requestedOnly, false)
}

// relayOne relays the one unprocessed notification.requested event,
// confirming it, and returns its message id.
func relayOne(t *testing.T, ctx context.Context, s Store) int64 {
	t.Helper()
	evs := relayed(t, ctx, s, requestedOnly, true)
	require.Len(t, evs, 1)
	return evs[0].ID
}

// relayed runs one relay batch of types (up to 1000 rows) and returns its
// events in id order, confirming every one when confirm, as a relay whose
// broker took them does, and none otherwise: they stay unprocessed.
func relayed(t *testing.T, ctx context.Context, s Store, types []string, confirm bool) []notify.Event {
	t.Helper()
	var got []notify.Event
	_, err := relay.Batch(ctx, s, 1000, types, func(_ context.Context, evs []notify.Event) ([]int64, error) {
		got = append(got, evs...)
		if !confirm {
			return nil, nil
		}
		return ids(evs), nil
	})
	require.NoError(t, err)
	return got
}

// pluck returns f of each of xs, in order.
func pluck[T, V any](xs []T, f func(T) V) []V {
	out := make([]V, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

// together runs fn(0) to fn(n-1), each in a goroutine of its own, lets
// them all go at once, and waits until every one has returned.
func together(n int, fn func(i int)) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			fn(i)
		})
	}
	close(start)
	wg.Wait()
}

// relayNothing requires that a relay batch of types takes no row (and so
// calls no publish), when: what the outbox holds.
func relayNothing(t *testing.T, ctx context.Context, s Store, types []string, when string) {
	t.Helper()
	n, err := relay.Batch(ctx, s, 10, types, func(context.Context, []notify.Event) ([]int64, error) {
		t.Error("publish called " + when)
		return nil, nil
	})
	require.NoError(t, err)
	require.Zero(t, n)
}

func ids(evs []notify.Event) []int64 { return pluck(evs, func(e notify.Event) int64 { return e.ID }) }

func msgIDs(ms []notify.Message) []int64 {
	return pluck(ms, func(m notify.Message) int64 { return m.ID })
}

func testPing(t *testing.T, ctx context.Context, h Harness) {
	require.NoError(t, h.Store.Ping(ctx))
}

func testCreateGet(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	before := time.Now().Add(-time.Minute)
	req := request(1)
	c, err := s.Create(ctx, notify.NewNotification{Request: req, IdempotencyKey: "k-1"})
	require.NoError(t, err)
	require.False(t, c.Replayed)
	// requested requires a notification that is req, pending and never
	// attempted: the create's answer and the stored row alike.
	requested := func(n notify.Notification) {
		t.Helper()
		require.Equal(t, req.UserID, n.UserID)
		require.Equal(t, req.Channel, n.Channel)
		require.Equal(t, req.To, n.To)
		require.Equal(t, req.Subject, n.Subject)
		require.Equal(t, req.Body, n.Body)
		require.Equal(t, notify.StatusPending, n.Status)
		require.Zero(t, n.Attempts)
		require.Empty(t, n.LastError)
		require.Nil(t, n.SentAt)
	}
	n := c.Notification
	require.Positive(t, n.ID)
	requested(n)
	require.True(t, n.CreatedAt.After(before), "created_at %v", n.CreatedAt)
	require.True(t, n.CreatedAt.Before(time.Now().Add(time.Minute)), "created_at %v", n.CreatedAt)

	got := get(t, ctx, s, n.ID)
	require.Equal(t, n.ID, got.ID)
	requested(got)
	require.Equal(t, "k-1", got.IdempotencyKey)
	require.WithinDuration(t, n.CreatedAt, got.CreatedAt, time.Millisecond)
	require.False(t, got.UpdatedAt.Before(got.CreatedAt.Add(-time.Millisecond)))

	// A second notification gets a new id and its own event.
	n2 := create(t, ctx, s, 2)
	require.Greater(t, n2.ID, n.ID)
	require.Equal(t, 2, h.Count(t, "notifications"))
	require.Equal(t, 2, h.Count(t, "outbox"))
	require.EqualValues(t, 2, unprocessed(t, ctx, s))
}

func testGetNotFound(t *testing.T, ctx context.Context, h Harness) {
	_, err := h.Store.Get(ctx, 424242)
	require.ErrorIs(t, err, notify.ErrNotFound)
}

func testIdempotentReplay(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	nn := notify.NewNotification{Request: request(1), IdempotencyKey: "same"}
	first, err := s.Create(ctx, nn)
	require.NoError(t, err)
	require.False(t, first.Replayed)

	again, err := s.Create(ctx, nn)
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, first.Notification.ID, again.Notification.ID)
	require.Equal(t, first.Notification.Subject, again.Notification.Subject)
	require.Equal(t, notify.StatusPending, again.Notification.Status)
	require.WithinDuration(t, first.Notification.CreatedAt, again.Notification.CreatedAt, time.Millisecond)

	require.Equal(t, 1, h.Count(t, "notifications"))
	require.Equal(t, 1, h.Count(t, "outbox"))
	require.EqualValues(t, 1, unprocessed(t, ctx, s))

	// Keys are independent of each other, and no key means no idempotency.
	other, err := s.Create(ctx, notify.NewNotification{Request: request(1), IdempotencyKey: "other"})
	require.NoError(t, err)
	require.False(t, other.Replayed)
	require.NotEqual(t, first.Notification.ID, other.Notification.ID)
	create(t, ctx, s, 1)
	create(t, ctx, s, 1)
	require.Equal(t, 4, h.Count(t, "notifications"))
	require.Equal(t, 4, h.Count(t, "outbox"))
}

func testIdempotencyConflict(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	first, err := s.Create(ctx, notify.NewNotification{Request: request(1), IdempotencyKey: "k"})
	require.NoError(t, err)

	for name, mutate := range map[string]func(*notify.CreateRequest){
		"to":      func(r *notify.CreateRequest) { r.To = "other@example.com" },
		"subject": func(r *notify.CreateRequest) { r.Subject = "Other" },
		"body":    func(r *notify.CreateRequest) { r.Body = "Other body" },
	} {
		req := request(1)
		mutate(&req)
		_, err := s.Create(ctx, notify.NewNotification{Request: req, IdempotencyKey: "k"})
		require.ErrorIs(t, err, notify.ErrConflict, name)
	}
	require.Equal(t, 1, h.Count(t, "notifications"))
	require.Equal(t, 1, h.Count(t, "outbox"))

	got := get(t, ctx, s, first.Notification.ID)
	require.Equal(t, request(1).Body, got.Body)
}

// A key is the user's: the same key from another user is another key, and
// each user's replays answer their own notification.
func testIdempotencyScopedToUser(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	a, b := request(1), request(1)
	b.UserID = "someone-else"
	first, err := s.Create(ctx, notify.NewNotification{Request: a, IdempotencyKey: "welcome"})
	require.NoError(t, err)
	other, err := s.Create(ctx, notify.NewNotification{Request: b, IdempotencyKey: "welcome"})
	require.NoError(t, err, "another user's key does not conflict")
	require.False(t, other.Replayed)
	require.NotEqual(t, first.Notification.ID, other.Notification.ID)
	require.Equal(t, 2, h.Count(t, "notifications"))
	require.Equal(t, 2, h.Count(t, "outbox"))

	for _, c := range []struct {
		req  notify.CreateRequest
		want int64
	}{{a, first.Notification.ID}, {b, other.Notification.ID}} {
		again, err := s.Create(ctx, notify.NewNotification{Request: c.req, IdempotencyKey: "welcome"})
		require.NoError(t, err)
		require.True(t, again.Replayed)
		require.Equal(t, c.want, again.Notification.ID)
		require.Equal(t, c.req.UserID, again.Notification.UserID)
	}
	// A conflict is still one user's own.
	changed := b
	changed.Body = "Another body"
	_, err = s.Create(ctx, notify.NewNotification{Request: changed, IdempotencyKey: "welcome"})
	require.ErrorIs(t, err, notify.ErrConflict)
	require.Equal(t, 2, h.Count(t, "notifications"))
}

// A key answers for notify.IdempotencyWindow after its first create; then
// it makes a new notification, which holds it from then on.
func testIdempotencyExpires(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	nn := notify.NewNotification{Request: request(1), IdempotencyKey: "daily-digest"}
	first, err := s.Create(ctx, nn)
	require.NoError(t, err)

	// A minute before the end of the window it still answers.
	h.Backdate(t, first.Notification.ID, notify.IdempotencyWindow-time.Minute)
	again, err := s.Create(ctx, nn)
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, first.Notification.ID, again.Notification.ID)

	// Past it, the same key and body make a new notification and event.
	h.Backdate(t, first.Notification.ID, 2*time.Minute)
	fresh, err := s.Create(ctx, nn)
	require.NoError(t, err)
	require.False(t, fresh.Replayed)
	require.NotEqual(t, first.Notification.ID, fresh.Notification.ID)
	require.Equal(t, 2, h.Count(t, "notifications"))
	require.Equal(t, 2, h.Count(t, "outbox"))

	// The new one holds the key now: replays answer it, another body
	// conflicts with it.
	replay, err := s.Create(ctx, nn)
	require.NoError(t, err)
	require.True(t, replay.Replayed)
	require.Equal(t, fresh.Notification.ID, replay.Notification.ID)
	other := nn
	other.Request.Body = "Another body"
	_, err = s.Create(ctx, other)
	require.ErrorIs(t, err, notify.ErrConflict)

	// After the window another body is no conflict either.
	h.Backdate(t, fresh.Notification.ID, notify.IdempotencyWindow+time.Minute)
	third, err := s.Create(ctx, other)
	require.NoError(t, err)
	require.False(t, third.Replayed)
	require.Equal(t, 3, h.Count(t, "notifications"))

	// The old notifications are untouched but for the key.
	got := get(t, ctx, s, first.Notification.ID)
	require.Equal(t, notify.StatusPending, got.Status)
	require.Equal(t, request(1).Body, got.Body)
}

// Concurrent creates with one key make one notification, for a fresh key
// and for a key whose window has passed.
func testIdempotencyRacers(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	const racers = 8
	race := func(nn notify.NewNotification) (ids map[int64]int, created int) {
		var (
			mu  sync.Mutex
			wg  sync.WaitGroup
			all []notify.Created
		)
		ids = map[int64]int{}
		for range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := s.Create(ctx, nn)
				assert.NoError(t, err)
				mu.Lock()
				all = append(all, c)
				mu.Unlock()
			}()
		}
		wg.Wait()
		for _, c := range all {
			ids[c.Notification.ID]++
			if !c.Replayed {
				created++
			}
		}
		return ids, created
	}
	nn := notify.NewNotification{Request: request(1), IdempotencyKey: "race"}
	ids, created := race(nn)
	require.Len(t, ids, 1, "one notification for the key: %v", ids)
	require.Equal(t, 1, created, "one create, the others replays")
	var old int64
	for id := range ids {
		old = id
	}

	h.Backdate(t, old, notify.IdempotencyWindow+time.Minute)
	ids, created = race(nn)
	require.Len(t, ids, 1, "one new notification for the expired key: %v", ids)
	require.Equal(t, 1, created)
	require.NotContains(t, ids, old)
	require.Equal(t, 2, h.Count(t, "notifications"))
	require.Equal(t, 2, h.Count(t, "outbox"))
}

func testInjectedFault(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	for _, key := range []string{"", "fault-key"} {
		_, err := s.Create(ctx, notify.NewNotification{Request: request(1), IdempotencyKey: key, Fault: notify.FaultAfterOutboxInsert})
		require.ErrorIs(t, err, notify.ErrInjectedFault)
	}
	c := requireFaultKeptNothing(t, ctx, h, notify.NewNotification{Request: request(2), IdempotencyKey: "fault-key"})
	require.Equal(t, request(2).Body, c.Notification.Body)
	require.Equal(t, 1, h.Count(t, "notifications"))
	require.Equal(t, 1, h.Count(t, "outbox"))
}

// requireFaultKeptNothing requires that what the debug fault failed (a
// create or a batch) was written by no part: no notification, no outbox
// row, no event left to relay, and its idempotency key is free, so next,
// created under it, is new and not a replay. It returns next's answer.
func requireFaultKeptNothing(t *testing.T, ctx context.Context, h Harness, next notify.NewNotification) notify.Created {
	t.Helper()
	require.Zero(t, h.Count(t, "notifications"))
	require.Zero(t, h.Count(t, "outbox"))
	require.Zero(t, unprocessed(t, ctx, h.Store))
	c, err := h.Store.Create(ctx, next)
	require.NoError(t, err)
	require.False(t, c.Replayed, "the failed write kept its idempotency key")
	return c
}

func testMigrateTwice(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.Migrate(ctx))
	got := get(t, ctx, s, n.ID)
	require.Equal(t, n.ID, got.ID)
	require.Equal(t, 1, h.Count(t, "notifications"))
	require.Equal(t, 1, h.Count(t, "outbox"))
	require.EqualValues(t, 1, unprocessed(t, ctx, s))
}

func testRelayBatchEvents(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	// An empty outbox: 0 and publish is not called.
	relayNothing(t, ctx, s, nil, "on an empty outbox")

	var created []notify.Notification
	for i := range 3 {
		created = append(created, create(t, ctx, s, i))
	}
	var got []notify.Event
	n, err := relay.Batch(ctx, s, 10, nil, func(_ context.Context, evs []notify.Event) ([]int64, error) {
		got = evs
		return ids(evs), nil
	})

	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Len(t, got, 3)
	require.True(t, slices.IsSorted(ids(got)), "events in id order: %v", ids(got))
	for i, e := range got {
		require.Positive(t, e.ID)
		require.Equal(t, notify.EventRequested, e.Type)
		require.WithinDuration(t, time.Now(), e.OccurredAt, time.Minute)
		// The payload is what a worker decodes.
		r, nid, err := notify.Message{ID: e.ID, Type: e.Type, Payload: e.Payload}.Decode()
		require.NoError(t, err, "payload %s", e.Payload)
		require.Equal(t, created[i].ID, nid)
		require.Equal(t, notify.NewRequested(created[i]), r)
		var fields map[string]any
		require.NoError(t, json.Unmarshal(e.Payload, &fields))
		require.Len(t, fields, 6)
	}
	require.Zero(t, unprocessed(t, ctx, s))
	require.Equal(t, 3, h.Count(t, "outbox"))

	relayNothing(t, ctx, s, nil, "with every row processed")
}

func testRelayBatchPartial(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	for i := range 5 {
		create(t, ctx, s, i)
	}
	all := ids(allEvents(t, ctx, s))
	require.Len(t, all, 5)
	require.EqualValues(t, 5, unprocessed(t, ctx, s), "confirming nothing marks nothing")

	// limit is honoured, in id order; only the confirmed ids are marked.
	var got []int64
	n, err := relay.Batch(ctx, s, 3, nil, func(_ context.Context, evs []notify.Event) ([]int64, error) {
		got = ids(evs)
		return []int64{evs[0].ID, evs[2].ID}, nil
	})

	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, all[:3], got)
	require.EqualValues(t, 3, unprocessed(t, ctx, s))

	// The unconfirmed row comes again, first, with the rows not yet claimed.
	require.Equal(t, []int64{all[1], all[3], all[4]}, ids(allEvents(t, ctx, s)))

	// An id publish returns that was not in the batch marks nothing.
	n, err = relay.Batch(ctx, s, 1, nil, func(_ context.Context, evs []notify.Event) ([]int64, error) {
		return []int64{all[4]}, nil
	})

	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []int64{all[1], all[3], all[4]}, ids(allEvents(t, ctx, s)))
}

func testRelayBatchPublishError(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	for i := range 3 {
		create(t, ctx, s, i)
	}
	boom := errors.New("broker said no")
	var all []int64
	n, err := relay.Batch(ctx, s, 10, nil, func(_ context.Context, evs []notify.Event) ([]int64, error) {
		all = ids(evs)
		return all[:1], boom
	})

	require.ErrorIs(t, err, boom)
	require.Equal(t, 3, n)
	require.EqualValues(t, 2, unprocessed(t, ctx, s), "the confirmed row is committed despite the error")
	require.Equal(t, all[1:], ids(allEvents(t, ctx, s)))

	// Nothing confirmed and an error: nothing marked.
	_, err = relay.Batch(ctx, s, 10, nil, func(context.Context, []notify.Event) ([]int64, error) { return nil, boom })
	require.ErrorIs(t, err, boom)
	require.EqualValues(t, 2, unprocessed(t, ctx, s))
}

func testRelayBatchConcurrent(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	for i := range 4 {
		create(t, ctx, s, i)
	}
	// Each publish waits until the other relay is inside publish too, so
	// both hold their rows at once. An engine with a single writer cannot
	// let the second in before the first commits: then the first gives up
	// waiting after a moment and the two run one after the other.
	barrier := wait
	if h.SingleWriter {
		barrier = 300 * time.Millisecond
	}
	var inside sync.WaitGroup
	inside.Add(2)
	both := make(chan struct{})
	go func() { inside.Wait(); close(both) }()
	var overlapped atomic.Int32
	got := make([][]int64, 2)
	errs := make([]error, 2)
	var done sync.WaitGroup
	for r := range 2 {
		done.Add(1)
		go func() {
			defer done.Done()
			entered := false
			_, errs[r] = relay.Batch(ctx, s, 2, nil, func(_ context.Context, evs []notify.Event) ([]int64, error) {
				if !entered {
					entered = true
					inside.Done()
				}
				select {
				case <-both:
					overlapped.Add(1)
				case <-time.After(barrier):
				}
				got[r] = ids(evs)
				return got[r], nil
			})

			if !entered {
				inside.Done() // never published: do not hold the other back
			}
		}()
	}
	done.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	if !h.SingleWriter {
		require.EqualValues(t, 2, overlapped.Load(), "both relays must hold rows at the same time")
	}
	require.Len(t, got[0], 2)
	require.Len(t, got[1], 2)
	for _, id := range got[0] {
		require.NotContains(t, got[1], id, "both relays got row %d", id)
	}
	require.Zero(t, unprocessed(t, ctx, s))
}

func testSubscribe(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := s.Subscribe(subCtx)
	other := s.Subscribe(ctx) // a second subscriber is woken too

	// receive waits for a wake-up and checks that what woke it is visible.
	receive := func(c <-chan struct{}, want int64) {
		t.Helper()
		select {
		case _, ok := <-c:
			require.True(t, ok, "channel closed early")
		case <-time.After(wait):
			t.Fatal("no wake-up after a create committed")
		}
		require.GreaterOrEqual(t, unprocessed(t, ctx, s), want)
	}
	// An engine may wake a new subscriber once on its own (rows may have
	// been committed before it listened); the first receive absorbs that.
	// The second create must wake the subscriber again.
	create(t, ctx, s, 1)
	receive(ch, 1)
	receive(other, 1)
	create(t, ctx, s, 2)
	receive(ch, 2)
	receive(other, 2)

	cancel()
	require.Eventually(t, func() bool {
		select {
		case _, ok := <-ch:
			return !ok
		default:
			return false
		}
	}, wait, 5*time.Millisecond, "channel not closed after its context ended")

	// The other subscriber is still served after the first one left.
	create(t, ctx, s, 3)
	receive(other, 3)
}

func testDeliverOnce(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	const msg = 1001
	var sends atomic.Int32
	send := func(context.Context) error { sends.Add(1); return nil }

	out, err := deliverytest.Deliver(ctx, s, msg, n.ID, send)
	require.NoError(t, err)
	require.Equal(t, notify.OutcomeSent, out)
	require.EqualValues(t, 1, sends.Load())
	got := get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusSent, got.Status)
	require.Equal(t, 1, got.Attempts)
	require.NotNil(t, got.SentAt)
	require.WithinDuration(t, time.Now(), *got.SentAt, time.Minute)
	require.False(t, got.UpdatedAt.Before(got.CreatedAt))
	require.Equal(t, 1, h.Count(t, "processed_messages"))

	out, err = deliverytest.Deliver(ctx, s, msg, n.ID, send)
	require.NoError(t, err)
	require.Equal(t, notify.OutcomeDuplicate, out)
	require.EqualValues(t, 1, sends.Load(), "a duplicate must not send")
	again := get(t, ctx, s, n.ID)
	require.Equal(t, 1, again.Attempts)
	require.Equal(t, 1, h.Count(t, "processed_messages"))
}

func testDeliverSendError(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	const msg = 2002
	boom := errors.New("451 try later")
	var sends atomic.Int32
	_, err := deliverytest.Deliver(ctx, s, msg, n.ID, func(context.Context) error { sends.Add(1); return boom })
	require.ErrorIs(t, err, boom, "send's error must be returned as is")
	require.EqualValues(t, 1, sends.Load())
	require.Equal(t, 1, h.Count(t, "processed_messages"), "a failed send releases the message id, keeping its retry mark")
	got := get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusPending, got.Status)
	require.Equal(t, 1, got.Attempts, "the failed attempt is counted")
	require.Equal(t, "451 try later", got.LastError)
	require.Nil(t, got.SentAt)

	// The same message id delivers later, in the retry's copy.
	out, err := deliverytest.DeliverCopy(ctx, s, notify.ClaimRequest{MessageID: msg, NotificationID: n.ID, RetryCount: 1},
		func(context.Context) error { sends.Add(1); return nil })
	require.NoError(t, err)
	require.Equal(t, notify.OutcomeSent, out)
	require.EqualValues(t, 2, sends.Load())
	got = get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusSent, got.Status)
	require.Equal(t, 2, got.Attempts)

	// A permanent failure comes back as is too, and fails the notification.
	m := create(t, ctx, s, 2)
	perm := notify.Permanent(errors.New("550 no such mailbox"))
	_, err = deliverytest.Deliver(ctx, s, msg+1, m.ID, func(context.Context) error { return perm })
	require.ErrorIs(t, err, perm)
	require.True(t, notify.IsPermanent(err))
	got = get(t, ctx, s, m.ID)
	require.Equal(t, notify.StatusFailed, got.Status)
}

func testDeliverAlreadySent(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	out, err := deliverytest.Deliver(ctx, s, 1, n.ID, func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, notify.OutcomeSent, out)

	// A redrive or a second event for a sent notification: a new message
	// id, nothing to do, and the message id is kept as processed.
	out, err = deliverytest.Deliver(ctx, s, 2, n.ID, func(context.Context) error {
		t.Error("send called for a notification already sent")
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, notify.OutcomeDuplicate, out)
	require.Equal(t, 2, h.Count(t, "processed_messages"))
	got := get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusSent, got.Status)
	require.Equal(t, 1, got.Attempts)
}

func testDeliverMissing(t *testing.T, ctx context.Context, h Harness) {
	out, err := deliverytest.Deliver(ctx, h.Store, 7, 987654, func(context.Context) error {
		t.Error("send called for a missing notification")
		return nil
	})
	require.ErrorIs(t, err, notify.ErrNotFound)
	require.True(t, notify.IsPermanent(err), "a missing notification cannot be cured by retrying")
	require.NotEqual(t, notify.OutcomeSent, out)
}

// Concurrent deliveries of one message: exactly one sends; the others
// find it claimed (busy) or, once it is recorded, a duplicate. No send waits
// for another's: there is no transaction open across a send.
func testDeliverConcurrent(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	const workers = 4
	var sends, busy atomic.Int32
	start := make(chan struct{})
	release := make(chan struct{})
	outs := make([]notify.Outcome, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			outs[w], errs[w] = deliverytest.Deliver(ctx, s, 77, n.ID, func(context.Context) error {
				sends.Add(1)
				<-release // the others return while this send is in flight
				return nil
			})
			if errs[w] != nil {
				busy.Add(1)
			}
		}()
	}
	close(start)
	require.Eventually(t, func() bool { return sends.Load() == 1 && busy.Load() == workers-1 }, wait, time.Millisecond,
		"the other deliveries did not come back while the send ran")
	close(release)
	wg.Wait()
	sent := 0
	for w := range workers {
		if errs[w] != nil {
			require.ErrorContains(t, errs[w], "claimed by another delivery")
			continue
		}
		require.Equal(t, notify.OutcomeSent, outs[w])
		sent++
	}
	require.Equal(t, 1, sent)
	require.EqualValues(t, 1, sends.Load(), "send must run exactly once")
	got := get(t, ctx, s, n.ID)
	require.Equal(t, 1, got.Attempts)
	require.Equal(t, 1, h.Count(t, "processed_messages"))
}

func testRecordFailureTransient(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	require.NoError(t, recordFailure(ctx, s, 5, n.ID, "421 try later", false))
	require.NoError(t, recordFailure(ctx, s, 6, n.ID, "connection refused", false))
	got := get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusPending, got.Status)
	require.Equal(t, 2, got.Attempts)
	require.Equal(t, "connection refused", got.LastError)
	require.Equal(t, 2, h.Count(t, "processed_messages"), "a transient failure does not consume the message (its row keeps the retry mark)")

	// The retry delivers; attempts keeps counting.
	out, err := deliverytest.DeliverCopy(ctx, s, notify.ClaimRequest{MessageID: 5, NotificationID: n.ID, RetryCount: 1},
		func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, notify.OutcomeSent, out)
	got = get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusSent, got.Status)
	require.Equal(t, 3, got.Attempts)
}

func testRecordFailureDead(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	require.NoError(t, recordFailure(ctx, s, 9, n.ID, "550 mailbox unavailable", true))
	got := get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusFailed, got.Status)
	require.Equal(t, 1, got.Attempts)
	require.Equal(t, "550 mailbox unavailable", got.LastError)
	require.Nil(t, got.SentAt)
	require.Equal(t, 1, h.Count(t, "processed_messages"))

	// The same message again (a broker redelivery) is a duplicate.
	noSend := func(context.Context) error {
		t.Error("send called for a dead-lettered notification")
		return nil
	}
	out, err := deliverytest.Deliver(ctx, s, 9, n.ID, noSend)
	require.NoError(t, err)
	require.Equal(t, notify.OutcomeDuplicate, out)
	// Another message for it: not pending, nothing to do.
	out, err = deliverytest.Deliver(ctx, s, 10, n.ID, noSend)
	require.NoError(t, err)
	require.Equal(t, notify.OutcomeDuplicate, out)
}

func testRecordFailureNotPending(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	n := create(t, ctx, s, 1)
	_, err := deliverytest.Deliver(ctx, s, 1, n.ID, func(context.Context) error { return nil })
	require.NoError(t, err)
	// A late failure report (compare-and-set: only a pending notification
	// changes) leaves a sent notification alone.
	require.NoError(t, recordFailure(ctx, s, 2, n.ID, "late", false))
	require.NoError(t, recordFailure(ctx, s, 3, n.ID, "late", true))
	got := get(t, ctx, s, n.ID)
	require.Equal(t, notify.StatusSent, got.Status)
	require.Equal(t, 1, got.Attempts)
	require.Empty(t, got.LastError)

	// A missing notification is no error.
	require.NoError(t, recordFailure(ctx, s, 4, 555555, "gone", false))
}

func testClaimLease(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	var created []notify.Notification
	for i := range 3 {
		created = append(created, create(t, ctx, s, i))
	}
	a, err := s.Claim(ctx, "worker-a", 2, time.Hour)
	require.NoError(t, err)
	require.Len(t, a, 2)
	require.True(t, slices.IsSorted(msgIDs(a)))
	for i, m := range a {
		require.Equal(t, notify.EventRequested, m.Type)
		require.Zero(t, m.RetryCount)
		_, nid, err := m.Decode()
		require.NoError(t, err)
		require.Equal(t, created[i].ID, nid)
	}

	// The leased rows are hidden; the third is not.
	b, err := s.Claim(ctx, "worker-b", 10, time.Hour)
	require.NoError(t, err)
	require.Len(t, b, 1)
	require.Greater(t, b[0].ID, a[1].ID)
	c, err := s.Claim(ctx, "worker-c", 10, time.Hour)
	require.NoError(t, err)
	require.Empty(t, c)

	// Only the holder of the lease can finish a row.
	require.NoError(t, s.Finish(ctx, []notify.OutboxKey{a[0].Key()}, "worker-b", ""))
	require.EqualValues(t, 3, unprocessed(t, ctx, s))
	require.NoError(t, s.Finish(ctx, []notify.OutboxKey{a[0].Key()}, "worker-a", ""))
	require.EqualValues(t, 2, unprocessed(t, ctx, s))
	// Finishing twice changes nothing.
	require.NoError(t, s.Finish(ctx, []notify.OutboxKey{a[0].Key()}, "worker-a", ""))
	require.EqualValues(t, 2, unprocessed(t, ctx, s))
	// A finished row is never claimed again, nor relayed.
	require.NotContains(t, ids(allEvents(t, ctx, s)), a[0].ID)
}

func testClaimExpiredLease(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	create(t, ctx, s, 1)
	a, err := s.Claim(ctx, "worker-a", 10, 200*time.Millisecond)
	require.NoError(t, err)
	require.Len(t, a, 1)

	var b []notify.Message
	require.Eventually(t, func() bool {
		b, err = s.Claim(ctx, "worker-b", 10, time.Hour)
		return err != nil || len(b) == 1
	}, wait, 20*time.Millisecond, "row not claimable after its lease expired")
	require.NoError(t, err)
	require.Equal(t, a[0].ID, b[0].ID)

	// The first worker's lease is stale: its Finish and Reschedule do nothing.
	require.NoError(t, s.Finish(ctx, []notify.OutboxKey{a[0].Key()}, "worker-a", ""))
	require.NoError(t, s.Reschedule(ctx, a[0].Key(), "worker-a", 0, "stale", true))
	require.EqualValues(t, 1, unprocessed(t, ctx, s))
	none, err := s.Claim(ctx, "worker-c", 10, time.Hour)
	require.NoError(t, err)
	require.Empty(t, none, "a stale Reschedule must not end the new lease")

	require.NoError(t, s.Finish(ctx, []notify.OutboxKey{b[0].Key()}, "worker-b", ""))
	require.Zero(t, unprocessed(t, ctx, s))
}

func testReschedule(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	create(t, ctx, s, 1)
	create(t, ctx, s, 2)
	m, err := s.Claim(ctx, "w", 10, time.Hour)
	require.NoError(t, err)
	require.Len(t, m, 2)
	later, now := m[0], m[1]

	// A retry far in the future hides the row; one due at once shows it
	// again with the retry counted.
	require.NoError(t, s.Reschedule(ctx, later.Key(), "w", time.Hour, "421 busy", true))
	require.NoError(t, s.Reschedule(ctx, now.Key(), "w", 0, "421 busy", true))
	got, err := s.Claim(ctx, "w2", 10, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []int64{now.ID}, msgIDs(got))
	require.Equal(t, 1, got[0].RetryCount)

	// Without retry (a release) the count stays.
	require.NoError(t, s.Reschedule(ctx, now.Key(), "w2", 0, "", false))
	got, err = s.Claim(ctx, "w3", 10, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []int64{now.ID}, msgIDs(got))
	require.Equal(t, 1, got[0].RetryCount)

	// A short delay: hidden at first, due after it.
	require.NoError(t, s.Reschedule(ctx, now.Key(), "w3", 2*time.Second, "again", true))
	got, err = s.Claim(ctx, "w4", 10, time.Hour)
	require.NoError(t, err)
	require.Empty(t, got)
	require.Eventually(t, func() bool {
		got, err = s.Claim(ctx, "w4", 10, time.Hour)
		return err != nil || len(got) == 1
	}, wait, 50*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, now.ID, got[0].ID)
	require.Equal(t, 2, got[0].RetryCount)

	// Rescheduled rows are still the backlog.
	require.EqualValues(t, 2, unprocessed(t, ctx, s))
}

func testFinishDeadLetter(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	create(t, ctx, s, 1)
	m, err := s.Claim(ctx, "w", 10, time.Hour)
	require.NoError(t, err)
	require.Len(t, m, 1)
	require.NoError(t, s.Finish(ctx, []notify.OutboxKey{m[0].Key()}, "w", "550 mailbox unavailable"))
	require.Zero(t, unprocessed(t, ctx, s))
	require.Equal(t, 1, h.Count(t, "outbox"), "a dead-lettered row is kept")
	got, err := s.Claim(ctx, "w", 10, time.Hour)
	require.NoError(t, err)
	require.Empty(t, got)
}

// One Finish settles many rows of one lease, and none of another's.
func testFinishMany(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	for i := range 4 {
		create(t, ctx, s, i+1)
	}
	a, err := s.Claim(ctx, "worker-a", 3, time.Hour)
	require.NoError(t, err)
	require.Len(t, a, 3)
	b, err := s.Claim(ctx, "worker-b", 3, time.Hour)
	require.NoError(t, err)
	require.Len(t, b, 1)

	rows := []notify.OutboxKey{a[0].Key(), a[1].Key(), a[2].Key(), b[0].Key()}
	require.NoError(t, s.Finish(ctx, rows, "worker-a", ""))
	require.EqualValues(t, 1, unprocessed(t, ctx, s), "worker-a's three rows are finished, worker-b's is not")
	require.NoError(t, s.Finish(ctx, nil, "worker-b", ""), "nothing to finish is no error")
	require.NoError(t, s.Finish(ctx, []notify.OutboxKey{b[0].Key()}, "worker-b", ""))
	require.Zero(t, unprocessed(t, ctx, s))
}

func testOutboxStats(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	st, err := s.OutboxStats(ctx)
	require.NoError(t, err)
	require.Equal(t, notify.OutboxStats{}, st)

	create(t, ctx, s, 1)
	create(t, ctx, s, 2)
	st, err = s.OutboxStats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Unprocessed)
	require.GreaterOrEqual(t, st.OldestAge, time.Duration(0))
	require.Less(t, st.OldestAge, time.Minute)

	// The age grows with the oldest row.
	require.Eventually(t, func() bool {
		st, err = s.OutboxStats(ctx)
		return err != nil || st.OldestAge >= 300*time.Millisecond
	}, wait, 20*time.Millisecond)
	require.NoError(t, err)
	require.Less(t, st.OldestAge, time.Minute)

	// Processing the oldest row drops the count; the age is now the
	// younger row's, and 0 once nothing is left.
	_, err = relay.Batch(ctx, s, 1, nil, func(_ context.Context, evs []notify.Event) ([]int64, error) {
		return ids(evs), nil
	})

	require.NoError(t, err)
	st, err = s.OutboxStats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Unprocessed)
	_, err = relay.Batch(ctx, s, 10, nil, func(_ context.Context, evs []notify.Event) ([]int64, error) {
		return ids(evs), nil
	})

	require.NoError(t, err)
	st, err = s.OutboxStats(ctx)
	require.NoError(t, err)
	require.Equal(t, notify.OutboxStats{}, st)
}
