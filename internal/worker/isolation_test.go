package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/worker"
)

// hostSender is a webhook-like sender whose destination is the to's host:
// sends to hosts in block wait until their channel closes (or the send's
// context ends); sends to hosts in down fail with that error scoped to the
// host; the others succeed.
type hostSender struct {
	mu    sync.Mutex
	block map[string]chan struct{}
	down  map[string]error
	sends map[string]int
}

func newHostSender() *hostSender {
	return &hostSender{block: map[string]chan struct{}{}, down: map[string]error{}, sends: map[string]int{}}
}

func (s *hostSender) Destination(m notify.Outgoing) string {
	host, _, _ := strings.Cut(strings.TrimPrefix(m.To, "https://"), "/")
	return host
}

func (s *hostSender) Send(ctx context.Context, m notify.Outgoing) error {
	key := s.Destination(m)
	s.mu.Lock()
	s.sends[key]++
	block, err := s.block[key], s.down[key]
	s.mu.Unlock()
	if err != nil {
		return notify.ForDestination(err, key)
	}
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (s *hostSender) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sends[key]
}

// settledAs polls d until it is settled and returns how.
func settledAs(t *testing.T, d *fakeDelivery, within time.Duration) settle {
	t.Helper()
	var s settle
	require.Eventually(t, func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		if len(d.settled) == 0 {
			return false
		}
		s = d.settled[0]
		return true
	}, within, time.Millisecond)
	return s
}

// Issue 32 point 2: a channel whose provider is down, or whose sends are all
// taken under its concurrency, holds no send slot that another channel
// needs. With one send slot, an email send hung at the mail server and
// emails queued behind it (HERALD_EMAIL_CONCURRENCY=1), a webhook is sent
// at once, and the emails beyond what may wait are parked, not held.
func TestOneChannelsWaitHoldsNoSendSlot(t *testing.T) {
	t.Parallel()
	mail := &blockingSender{release: make(chan struct{})}
	hooks := newHostSender()
	w, err := worker.New(nil, &fakeStore{}, map[string]worker.Channel{
		notify.ChannelEmail: {Sender: mail, Concurrency: 1},
		"webhook":           {Sender: hooks},
	}, worker.Config{Sends: 2, Patience: 200 * time.Millisecond, StoreBackoff: time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	var wg sync.WaitGroup
	emails := make([]*fakeDelivery, 8)
	for i := range emails {
		emails[i] = &fakeDelivery{msg: messageOn(t, int64(100+i), notify.ChannelEmail, "a@example.com")}
		wg.Go(func() { w.Handle(ctx, emails[i]) })
	}
	require.Eventually(t, func() bool { started, _ := mail.counts(); return started == 1 }, 5*time.Second, time.Millisecond)
	// The seven others: up to three wait for the channel's place, each at
	// most Patience, and all end parked, none holding the other send slot.
	parked := func() (n int) {
		for _, d := range emails {
			d.mu.Lock()
			if len(d.settled) == 1 && d.settled[0].how == "release" && d.settled[0].after > 0 {
				n++
			}
			d.mu.Unlock()
		}
		return n
	}
	require.Eventually(t, func() bool { return parked() == 7 }, 5*time.Second, time.Millisecond, "seven emails parked with a due time")
	hook := &fakeDelivery{msg: messageOn(t, 200, "webhook", "https://b.example/h")}
	w.Handle(ctx, hook)
	require.Equal(t, []string{"ack"}, hook.hows(), "the webhook sends beside the hung email")
	close(mail.release)
	wg.Wait()
	acked := 0
	for _, d := range emails {
		if slicesEqual(d.hows(), []string{"ack"}) {
			acked++
		}
	}
	require.Equal(t, 1, acked, "the hung email sent once released")
}

// Issue 32 point 1 (the worker's part) and "Fair across destinations": one
// endpoint takes no more than its share of the channel's sends. With a
// share of one and one send to endpoint a hung, a's next delivery waits
// Patience and is parked; b's deliveries are sent meanwhile.
func TestDestinationShare(t *testing.T) {
	t.Parallel()
	hooks := newHostSender()
	hooks.block["a.example"] = make(chan struct{})
	w, err := worker.New(nil, &fakeStore{}, map[string]worker.Channel{
		"webhook": {Sender: hooks, DestinationConcurrency: 1},
	}, worker.Config{Sends: 8, Patience: 100 * time.Millisecond, StoreBackoff: time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	first := &fakeDelivery{msg: messageOn(t, 1, "webhook", "https://a.example/h")}
	done := make(chan struct{})
	go func() { defer close(done); w.Handle(ctx, first) }()
	require.Eventually(t, func() bool { return hooks.count("a.example") == 1 }, 5*time.Second, time.Millisecond)
	second := &fakeDelivery{msg: messageOn(t, 2, "webhook", "https://a.example/h")}
	w.Handle(ctx, second)
	require.Equal(t, []string{"release"}, second.hows())
	require.Equal(t, 1, hooks.count("a.example"), "a's second delivery did not send beside its first")
	for i := range 5 {
		d := &fakeDelivery{msg: messageOn(t, int64(10+i), "webhook", "https://b.example/h")}
		w.Handle(ctx, d)
		require.Equal(t, []string{"ack"}, d.hows())
	}
	close(hooks.block["a.example"])
	<-done
	require.Equal(t, []string{"ack"}, first.hows())
}

// A delivery to a paused destination is parked until the gate's next turn
// (not handed back at once to come straight back), and the one that
// failed is parked the same way.
func TestPausedDestinationParksUntilItsNextTurn(t *testing.T) {
	t.Parallel()
	hooks := newHostSender()
	hooks.down["a.example"] = notify.SenderDown(errors.New("dial tcp: connection refused"))
	w, err := worker.New(nil, &fakeStore{}, map[string]worker.Channel{"webhook": {Sender: hooks}},
		worker.Config{SenderBackoff: 4 * time.Second, SenderBackoffMax: 8 * time.Second, StoreBackoff: time.Millisecond})
	require.NoError(t, err)
	failed := &fakeDelivery{msg: messageOn(t, 1, "webhook", "https://a.example/h")}
	w.Handle(context.Background(), failed)
	s := settledAs(t, failed, time.Second)
	require.Equal(t, "release", s.how)
	require.GreaterOrEqual(t, s.after, 2*time.Second, "parked for the gate's backoff (4s, jitter on its upper half)")
	next := &fakeDelivery{msg: messageOn(t, 2, "webhook", "https://a.example/h")}
	w.Handle(context.Background(), next)
	s = settledAs(t, next, time.Second)
	require.Equal(t, "release", s.how)
	require.Greater(t, s.after, time.Second)
	require.Equal(t, 1, hooks.count("a.example"), "no second try before the next turn")
}

// memBook is a DestinationBook in memory, for the worker's logic.
type memBook struct {
	mu   sync.Mutex
	recs map[string]notify.Destination
}

func (b *memBook) DestinationFailing(_ context.Context, channel, key, reason string, at time.Time) (notify.Destination, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.recs[key]
	if !ok {
		r = notify.Destination{Key: key, Channel: channel, State: notify.DestinationFailing, Since: at}
	}
	r.Reason = reason
	b.recs[key] = r
	return r, nil
}

func (b *memBook) DestinationUp(_ context.Context, key string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.recs[key].State == notify.DestinationFailing {
		delete(b.recs, key)
	}
	return nil
}

func (b *memBook) DisableDestination(_ context.Context, key, reason string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.recs[key]
	if !ok || r.State != notify.DestinationFailing {
		return false, nil
	}
	r.State, r.Reason = notify.DestinationDisabled, reason
	b.recs[key] = r
	return true, nil
}

func (b *memBook) DisabledDestinations(context.Context) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var keys []string
	for k, r := range b.recs {
		if r.State == notify.DestinationDisabled {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

func (b *memBook) get(key string) (notify.Destination, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.recs[key]
	return r, ok
}

// chanSource hands the worker the deliveries sent on its channel.
type chanSource chan notify.Delivery

func (c chanSource) Consume(ctx context.Context, handle notify.Handler) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return nil
		case d := <-c:
			wg.Go(func() { handle(ctx, d) })
		}
	}
}

// Destinations have a life: a failing destination is recorded as failing
// (with its first failure's time), one failing for longer than
// DisableAfter is disabled, and its deliveries are then dead-lettered with
// the reason, while the other destinations' are sent; one that comes back
// before is recorded up again.
func TestFailingDestinationIsRecordedThenDisabled(t *testing.T) {
	t.Parallel()
	hooks := newHostSender()
	hooks.down["a.example"] = notify.SenderDown(errors.New("dial tcp: connection refused"))
	hooks.down["c.example"] = notify.Throttled(errors.New("429"), 0)
	book := &memBook{recs: map[string]notify.Destination{}}
	src := make(chanSource)
	w, err := worker.New(src, &fakeStore{}, map[string]worker.Channel{"webhook": {Sender: hooks}}, worker.Config{
		SenderBackoff: 20 * time.Millisecond, SenderBackoffMax: 40 * time.Millisecond, StoreBackoff: time.Millisecond,
		Destinations: book, DisableAfter: 300 * time.Millisecond,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = w.Run(ctx) }()

	send := func(id int64, to string) *fakeDelivery {
		d := &fakeDelivery{msg: messageOn(t, id, "webhook", to)}
		src <- d
		return d
	}
	require.Equal(t, "release", settledAs(t, send(1, "https://a.example/h"), 5*time.Second).how)
	require.Equal(t, "release", settledAs(t, send(2, "https://c.example/h"), 5*time.Second).how)
	require.Eventually(t, func() bool {
		r, ok := book.get("a.example")
		return ok && r.State == notify.DestinationFailing && r.Channel == "webhook" && strings.Contains(r.Reason, "connection refused")
	}, 5*time.Second, time.Millisecond)
	first, _ := book.get("a.example")
	// The records are written off the deliveries' path, each when its
	// gate closes: c's may come after a's.
	require.Eventually(t, func() bool {
		_, ok := book.get("c.example")
		return ok
	}, 5*time.Second, time.Millisecond, "a throttling destination is recorded failing too")

	// c comes back: its record goes.
	hooks.mu.Lock()
	delete(hooks.down, "c.example")
	hooks.mu.Unlock()
	require.Eventually(t, func() bool {
		d := send(3, "https://c.example/h")
		return settledAs(t, d, 5*time.Second).how == "ack"
	}, 5*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { _, ok := book.get("c.example"); return !ok }, 5*time.Second, time.Millisecond)

	// a keeps failing: once past DisableAfter from its first failure it is
	// disabled, and its deliveries are dead-lettered with the reason.
	var dead settle
	id := int64(100)
	require.Eventually(t, func() bool {
		id++
		s := settledAs(t, send(id, "https://a.example/h"), 5*time.Second)
		dead = s
		return s.how == "dead"
	}, 10*time.Second, 20*time.Millisecond)
	require.Contains(t, dead.reason, "destination a.example is disabled")
	r, _ := book.get("a.example")
	require.Equal(t, notify.DestinationDisabled, r.State)
	require.Equal(t, first.Since, r.Since, "since is the first failure's")
	require.GreaterOrEqual(t, time.Since(r.Since), 300*time.Millisecond)
	ok2 := send(999, "https://b.example/h")
	require.Equal(t, "ack", settledAs(t, ok2, 5*time.Second).how, "other destinations go on")
}

func slicesEqual(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }
