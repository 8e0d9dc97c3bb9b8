package storetest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/deliverytest"
)

// destinationTests are the subtests of the destination records
// (worker.DestinationBook, api.Destinations).
var destinationTests = []subtest{
	{"DestinationFailing", testDestinationFailing},
	{"DestinationDisable", testDestinationDisable},
	{"DestinationUp", testDestinationUp},
	{"DestinationEnable", testDestinationEnable},
	{"DestinationPending", testDestinationPending},
	{"DestinationDisableRace", testDestinationDisableRace},
	{"DestinationPaging", testDestinationPaging},
	{"DestinationWaiting", testDestinationWaiting},
}

// listDestinations reads every record, a page of 2 at a time.
func listDestinations(t *testing.T, ctx context.Context, s Store) []notify.Destination {
	t.Helper()
	var out []notify.Destination
	f := notify.DestinationFilter{Limit: 2}
	for range 1000 {
		p, err := s.ListDestinations(ctx, f)
		require.NoError(t, err)
		out = append(out, p.Items...)
		if p.Next == "" {
			return out
		}
		f.After = p.Next
	}
	t.Fatal("the destinations listing does not end")
	return nil
}

const (
	hookKey  = "https://hooks.example.com:443"
	otherKey = "http://10.0.0.7:8080"
)

// destination returns key's record as ListDestinations shows it, and
// whether there is one.
func destination(t *testing.T, ctx context.Context, s Store, key string) (notify.Destination, bool) {
	t.Helper()
	ds := listDestinations(t, ctx, s)
	for _, d := range ds {
		if d.Key == key {
			return d, true
		}
	}
	return notify.Destination{}, false
}

// A failing record keeps the earliest since across updates and takes the
// latest reason; its times come back in UTC.
func testDestinationFailing(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	d, err := s.DestinationFailing(ctx, "webhook", hookKey, "connection refused", t0)
	require.NoError(t, err)
	require.Equal(t, hookKey, d.Key)
	require.Equal(t, "webhook", d.Channel)
	require.Equal(t, notify.DestinationFailing, d.State)
	require.Equal(t, "connection refused", d.Reason)
	require.WithinDuration(t, t0, d.Since, time.Millisecond)
	require.Equal(t, time.UTC, d.Since.Location())

	// Later: the since stays, the reason is the new one.
	d, err = s.DestinationFailing(ctx, "webhook", hookKey, "503 Service Unavailable", t0.Add(30*time.Minute))
	require.NoError(t, err)
	require.Equal(t, notify.DestinationFailing, d.State)
	require.Equal(t, "503 Service Unavailable", d.Reason)
	require.WithinDuration(t, t0, d.Since, time.Millisecond)
	// An earlier report (another worker's clock) moves it back.
	d, err = s.DestinationFailing(ctx, "webhook", hookKey, "timeout", t0.Add(-time.Minute))
	require.NoError(t, err)
	require.WithinDuration(t, t0.Add(-time.Minute), d.Since, time.Millisecond)

	// One record per key; another key is another record.
	_, err = s.DestinationFailing(ctx, "email", notify.ChannelEmail, "dial tcp: connection refused", t0)
	require.NoError(t, err)
	ds := listDestinations(t, ctx, s)
	require.Len(t, ds, 2)
	require.Equal(t, notify.ChannelEmail, ds[0].Key, "listed by key")
	require.Equal(t, hookKey, ds[1].Key)
	require.Equal(t, "timeout", ds[1].Reason)
	require.WithinDuration(t, t0.Add(-time.Minute), ds[1].Since, time.Millisecond)
	require.Equal(t, time.UTC, ds[1].Since.Location())
	keys, err := s.DisabledDestinations(ctx)
	require.NoError(t, err)
	require.Empty(t, keys)
}

// Disabling is a compare-and-set on failing; a disabled record stays
// disabled, with its reason, whatever failures are reported after.
func testDestinationDisable(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	ok, err := s.DisableDestination(ctx, hookKey, "failing for 72h")
	require.NoError(t, err)
	require.False(t, ok, "no record: nothing to disable")

	t0 := time.Now().Add(-time.Hour)
	_, err = s.DestinationFailing(ctx, "webhook", hookKey, "connection refused", t0)
	require.NoError(t, err)
	_, err = s.DestinationFailing(ctx, "webhook", otherKey, "connection refused", t0)
	require.NoError(t, err)
	ok, err = s.DisableDestination(ctx, hookKey, "failing for 72h: connection refused")
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.DisableDestination(ctx, hookKey, "again")
	require.NoError(t, err)
	require.False(t, ok, "already disabled")

	d, err := s.DestinationFailing(ctx, "webhook", hookKey, "still refused", time.Now())
	require.NoError(t, err)
	require.Equal(t, notify.DestinationDisabled, d.State, "a failure report does not bring a disabled record back to failing")
	require.Equal(t, "failing for 72h: connection refused", d.Reason)
	require.WithinDuration(t, t0, d.Since, time.Millisecond)

	got, ok2 := destination(t, ctx, s, hookKey)
	require.True(t, ok2)
	require.Equal(t, notify.DestinationDisabled, got.State)
	require.Equal(t, "failing for 72h: connection refused", got.Reason)
	keys, err := s.DisabledDestinations(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{hookKey}, keys)
}

// Up removes a failing record, never a disabled one.
func testDestinationUp(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	require.NoError(t, s.DestinationUp(ctx, hookKey), "no record is no error")
	_, err := s.DestinationFailing(ctx, "webhook", hookKey, "refused", time.Now())
	require.NoError(t, err)
	_, err = s.DestinationFailing(ctx, "webhook", otherKey, "refused", time.Now())
	require.NoError(t, err)
	ok, err := s.DisableDestination(ctx, otherKey, "failing for 72h")
	require.NoError(t, err)
	require.True(t, ok)

	require.NoError(t, s.DestinationUp(ctx, hookKey))
	require.NoError(t, s.DestinationUp(ctx, otherKey))
	_, ok = destination(t, ctx, s, hookKey)
	require.False(t, ok, "a failing destination that is up again has no record")
	d, ok := destination(t, ctx, s, otherKey)
	require.True(t, ok, "a disabled destination stays disabled until enabled")
	require.Equal(t, notify.DestinationDisabled, d.State)

	// Failing again after up starts a new since.
	later := time.Now().Add(time.Minute)
	d, err = s.DestinationFailing(ctx, "webhook", hookKey, "refused", later)
	require.NoError(t, err)
	require.WithinDuration(t, later, d.Since, time.Millisecond)
}

// Enable removes a record, disabled or failing; no record is ErrNotFound.
func testDestinationEnable(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	require.ErrorIs(t, s.EnableDestination(ctx, hookKey), notify.ErrNotFound)
	_, err := s.DestinationFailing(ctx, "webhook", hookKey, "refused", time.Now())
	require.NoError(t, err)
	_, err = s.DestinationFailing(ctx, "telegram", "telegram", "401 Unauthorized", time.Now())
	require.NoError(t, err)
	ok, err := s.DisableDestination(ctx, hookKey, "failing for 72h")
	require.NoError(t, err)
	require.True(t, ok)

	require.NoError(t, s.EnableDestination(ctx, hookKey))
	require.NoError(t, s.EnableDestination(ctx, "telegram"))
	ds := listDestinations(t, ctx, s)
	require.Empty(t, ds)
	keys, err := s.DisabledDestinations(ctx)
	require.NoError(t, err)
	require.Empty(t, keys)
	require.ErrorIs(t, s.EnableDestination(ctx, hookKey), notify.ErrNotFound)
}

// The listing counts each destination's pending notifications: the ones
// created with its key and still pending, not the sent or dead-lettered
// ones, not those of another key or of none.
func testDestinationPending(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	mk := func(i int, channel, to, dest string) notify.Notification {
		t.Helper()
		r := request(i)
		r.Channel, r.To = channel, to
		if channel != notify.ChannelEmail {
			r.Subject = ""
		}
		c, err := s.Create(ctx, notify.NewNotification{Request: r, Destination: dest})
		require.NoError(t, err)
		return c.Notification
	}
	var hooks []notify.Notification
	for i := range 4 {
		hooks = append(hooks, mk(i, "webhook", "https://hooks.example.com/h/"+notify.FormatID(int64(i)), hookKey))
	}
	mk(10, "webhook", "http://10.0.0.7:8080/x", otherKey)
	mk(11, notify.ChannelEmail, "a@example.com", notify.ChannelEmail)
	mk(12, notify.ChannelEmail, "b@example.com", notify.ChannelEmail)
	mk(13, "webhook", "https://hooks.example.com/none", "") // created with no destination
	// One is sent, one dead-lettered: neither is pending.
	out, err := deliverytest.Deliver(ctx, s, 9001, hooks[0].ID, func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, notify.OutcomeSent, out)
	require.NoError(t, recordFailure(ctx, s, 9002, hooks[1].ID, "410 Gone", true))
	// An idempotent create also stores its destination.
	r := request(20)
	r.Channel, r.To, r.Subject = "webhook", "https://hooks.example.com/k", ""
	for range 2 {
		_, err := s.Create(ctx, notify.NewNotification{Request: r, IdempotencyKey: "dest-k", Destination: hookKey})
		require.NoError(t, err)
	}

	for _, k := range []string{hookKey, otherKey, notify.ChannelEmail} {
		_, err := s.DestinationFailing(ctx, "webhook", k, "refused", time.Now())
		require.NoError(t, err)
	}
	want := map[string]int64{hookKey: 3, otherKey: 1, notify.ChannelEmail: 2}
	ds := listDestinations(t, ctx, s)
	require.Len(t, ds, 3)
	for _, d := range ds {
		require.Equal(t, want[d.Key], d.Pending, d.Key)
	}
	// A destination with a record and no notification counts none.
	_, err = s.DestinationFailing(ctx, "webhook", "https://idle.example.com:443", "refused", time.Now())
	require.NoError(t, err)
	d, ok := destination(t, ctx, s, "https://idle.example.com:443")
	require.True(t, ok)
	require.Zero(t, d.Pending)
}

// Racing disables: exactly one wins; racing an up, the record ends as the
// winner left it (disabled, or gone).
func testDestinationDisableRace(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	_, err := s.DestinationFailing(ctx, "webhook", hookKey, "refused", time.Now())
	require.NoError(t, err)
	const racers = 8
	var wins atomic.Int32
	together(racers, func(int) {
		ok, err := s.DisableDestination(ctx, hookKey, "failing for 72h")
		if err != nil {
			t.Error(err)
		}
		if ok {
			wins.Add(1)
		}
	})
	require.EqualValues(t, 1, wins.Load(), "one disable wins")

	_, err = s.DestinationFailing(ctx, "webhook", otherKey, "refused", time.Now())
	require.NoError(t, err)
	var disabled atomic.Bool
	both := []func(){
		func() {
			ok, err := s.DisableDestination(ctx, otherKey, "failing for 72h")
			if err != nil {
				t.Error(err)
			}
			disabled.Store(ok)
		},
		func() {
			if err := s.DestinationUp(ctx, otherKey); err != nil {
				t.Error(err)
			}
		},
	}
	together(len(both), func(i int) { both[i]() })
	d, ok := destination(t, ctx, s, otherKey)
	if disabled.Load() {
		require.True(t, ok, "the disable won: the record stays")
		require.Equal(t, notify.DestinationDisabled, d.State)
	} else {
		require.False(t, ok, "the up won: no record")
	}
}

// The listing pages by key: each page holds up to its limit, a page that
// is full names the key to resume after, the last one none; a state
// filter keeps its records only; each page's records have their pending
// counts.
func testDestinationPaging(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	var keys []string
	for i := range 5 {
		k := "https://d" + notify.FormatID(int64(i)) + ".example.com:443"
		keys = append(keys, k)
		_, err := s.DestinationFailing(ctx, "webhook", k, "refused", time.Now())
		require.NoError(t, err)
	}
	r := request(1)
	r.Channel, r.To, r.Subject = "webhook", "https://d3.example.com/x", ""
	_, err := s.Create(ctx, notify.NewNotification{Request: r, Destination: keys[3]})
	require.NoError(t, err)
	ok, err := s.DisableDestination(ctx, keys[1], "failing for 72h")
	require.NoError(t, err)
	require.True(t, ok)

	p, err := s.ListDestinations(ctx, notify.DestinationFilter{Limit: 2})
	require.NoError(t, err)
	require.Equal(t, keys[:2], destKeys(p.Items))
	require.Equal(t, keys[1], p.Next)
	p, err = s.ListDestinations(ctx, notify.DestinationFilter{Limit: 2, After: p.Next})
	require.NoError(t, err)
	require.Equal(t, keys[2:4], destKeys(p.Items))
	require.Equal(t, int64(1), p.Items[1].Pending, "counted on a later page")
	p, err = s.ListDestinations(ctx, notify.DestinationFilter{Limit: 2, After: p.Next})
	require.NoError(t, err)
	require.Equal(t, keys[4:], destKeys(p.Items))
	require.Empty(t, p.Next, "the end")
	p, err = s.ListDestinations(ctx, notify.DestinationFilter{Limit: 5})
	require.NoError(t, err)
	require.Len(t, p.Items, 5)
	require.Empty(t, p.Next, "a page exactly full is the end")

	p, err = s.ListDestinations(ctx, notify.DestinationFilter{Limit: 10, State: notify.DestinationDisabled})
	require.NoError(t, err)
	require.Equal(t, []string{keys[1]}, destKeys(p.Items))
	p, err = s.ListDestinations(ctx, notify.DestinationFilter{Limit: 10, State: notify.DestinationFailing, After: keys[2]})
	require.NoError(t, err)
	require.Equal(t, keys[3:], destKeys(p.Items))
}

func destKeys(ds []notify.Destination) []string {
	return pluck(ds, func(d notify.Destination) string { return d.Key })
}

// A pending notification tells why it waits: the record of its
// destination, or else of its channel's one provider; a notification
// whose destination is up, or that is no longer pending, waits on
// nothing.
func testDestinationWaiting(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	mk := func(i int, dest string) notify.Notification {
		t.Helper()
		r := request(i)
		r.Channel, r.To, r.Subject = "webhook", "https://hooks.example.com/w", ""
		c, err := s.Create(ctx, notify.NewNotification{Request: r, Destination: dest})
		require.NoError(t, err)
		return c.Notification
	}
	n := mk(1, hookKey)
	other := mk(2, otherKey)
	sent := mk(3, hookKey)
	require.Nil(t, get(t, ctx, s, n.ID).Waiting, "its destination is up")

	t0 := time.Now().Add(-10 * time.Minute).Truncate(time.Millisecond)
	_, err := s.DestinationFailing(ctx, "webhook", hookKey, "webhook endpoint down: connection refused", t0)
	require.NoError(t, err)
	out, err := deliverytest.Deliver(ctx, s, 9001, sent.ID, func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, notify.OutcomeSent, out)

	w := get(t, ctx, s, n.ID).Waiting
	require.NotNil(t, w)
	require.Equal(t, hookKey, w.Destination)
	require.Equal(t, notify.DestinationFailing, w.State)
	require.Equal(t, "webhook endpoint down: connection refused", w.Reason)
	require.WithinDuration(t, t0, w.Since, time.Millisecond)
	require.Equal(t, time.UTC, w.Since.Location())
	require.Nil(t, get(t, ctx, s, other.ID).Waiting, "another destination")
	require.Nil(t, get(t, ctx, s, sent.ID).Waiting, "sent: it waits on nothing")

	// The channel's own record (its one provider down) stands when the
	// destination has none; the destination's own comes first.
	_, err = s.DestinationFailing(ctx, "webhook", "webhook", "webhook provider down: proxy refused", t0)
	require.NoError(t, err)
	w = get(t, ctx, s, other.ID).Waiting
	require.NotNil(t, w)
	require.Equal(t, "webhook", w.Destination)
	require.Equal(t, hookKey, get(t, ctx, s, n.ID).Waiting.Destination)

	ok, err := s.DisableDestination(ctx, hookKey, "disabled: failing for 72h")
	require.NoError(t, err)
	require.True(t, ok)
	w = get(t, ctx, s, n.ID).Waiting
	require.Equal(t, notify.DestinationDisabled, w.State)
	require.Equal(t, "disabled: failing for 72h", w.Reason)
}
