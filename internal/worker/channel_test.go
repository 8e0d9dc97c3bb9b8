package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/worker"
)

// messageOn is message id (notification id too) of channel to to.
func messageOn(t *testing.T, id int64, channel, to string) notify.Message {
	t.Helper()
	b, err := json.Marshal(notify.Requested{NotificationID: notify.FormatID(id), UserID: "u", Channel: channel, To: to, Body: "b"})
	require.NoError(t, err)
	return notify.Message{ID: id, Type: notify.EventRequested, Payload: b}
}

// The worker dispatches by the notification's channel: each channel's
// sender gets its own messages, the metrics say which channel, and a
// channel with no sender here is dead-lettered at once with the reason.
func TestDispatchByChannel(t *testing.T) {
	t.Parallel()
	store := &fakeStore{}
	mail, hook := &fakeSender{}, &fakeSender{}
	reg := prometheus.NewRegistry()
	w, err := worker.New(nil, store, map[string]worker.Channel{
		"email":   {Sender: mail},
		"webhook": {Sender: hook, SendTimeout: 5 * time.Second},
	}, worker.Config{StoreBackoff: time.Millisecond, Registerer: reg})
	require.NoError(t, err)
	require.Equal(t, []string{"email", "webhook"}, w.Channels())

	for _, m := range []notify.Message{
		messageOn(t, 1, "webhook", "https://example.com/hook"),
		message(t, 0),
		messageOn(t, 3, "webhook", "https://example.com/hook"),
	} {
		d := &fakeDelivery{msg: m}
		w.Handle(context.Background(), d)
		require.Equal(t, []string{"ack"}, d.hows())
	}
	require.Equal(t, 1, mail.count())
	require.Equal(t, 2, hook.count())
	require.Equal(t, "https://example.com/hook", hook.sent[0].To)
	require.Equal(t, "webhook", hook.sent[0].Channel)

	sms := &fakeDelivery{msg: messageOn(t, 4, "sms", "+3312345678")}
	w.Handle(context.Background(), sms)
	require.Equal(t, []string{"dead"}, sms.hows())
	require.Contains(t, sms.settled[0].reason, `channel "sms" has no sender in this worker (it delivers on email, webhook)`)
	require.Equal(t, 3, mail.count()+hook.count(), "nothing sent for sms")

	counter := func(channel, outcome string) float64 {
		return testutil.ToFloat64(counterVec(t, reg).WithLabelValues(channel, outcome))
	}
	require.Equal(t, 2.0, counter("webhook", "sent"))
	require.Equal(t, 1.0, counter("email", "sent"))
	require.Equal(t, 1.0, counter("unknown", "dead"))
	require.Equal(t, 12, testutil.CollectAndCount(reg, "herald_worker_deliveries_total"), "email, webhook and unknown, 4 outcomes each: a payload adds no label")
	require.Equal(t, 2, testutil.CollectAndCount(reg, "herald_sender_up"), "one per channel")

	// One channel's outage pauses that channel only.
	hook.setErr(notify.SenderDown(errors.New("connection refused")))
	d := &fakeDelivery{msg: messageOn(t, 5, "webhook", "https://example.com/hook")}
	w.Handle(context.Background(), d)
	require.Equal(t, []string{"release"}, d.hows())
	up, reason := w.ChannelStatus("webhook")
	require.False(t, up)
	require.Equal(t, "webhook provider down: connection refused", reason)
	up, _ = w.ChannelStatus("email")
	require.True(t, up)
	d = &fakeDelivery{msg: messageOn(t, 6, "email", "b@example.com")}
	w.Handle(context.Background(), d)
	require.Equal(t, []string{"ack"}, d.hows(), "email goes on")
}

// counterVec rebuilds herald_worker_deliveries_total from reg's gathered
// values, for ToFloat64 by labels.
func counterVec(t *testing.T, reg *prometheus.Registry) *prometheus.CounterVec {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "copy"}, []string{"channel", "outcome"})
	for _, mf := range mfs {
		if mf.GetName() != "herald_worker_deliveries_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			v.WithLabelValues(l["channel"], l["outcome"]).Add(m.GetCounter().GetValue())
		}
	}
	return v
}

// destSender is a sender of a channel with a provider per destination (a
// webhook endpoint, here the to's host): it fails every send to the
// destinations marked down, with the error scoped to that destination.
type destSender struct {
	mu    sync.Mutex
	down  map[string]error
	sends map[string]int
}

func (s *destSender) Destination(m notify.Outgoing) string {
	host, _, _ := strings.Cut(strings.TrimPrefix(m.To, "https://"), "/")
	return host
}

func (s *destSender) Send(_ context.Context, m notify.Outgoing) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := s.Destination(m)
	s.sends[key]++
	if err := s.down[key]; err != nil {
		return notify.ForDestination(err, key)
	}
	return nil
}

func (s *destSender) set(key string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down[key] = err
}

func (s *destSender) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sends[key]
}

// Issue 17 point 2: one destination down or throttling pauses only the
// deliveries to it. Its deliveries are handed back without a send while
// its gate is closed and spend no attempt; the other destination's are
// sent meanwhile; the channel stays up; when the destination is back, a
// trial send opens its gate and its deliveries go.
func TestDestinationGatePausesOnlyItsDestination(t *testing.T) {
	t.Parallel()
	for name, fail := range map[string]error{
		"down":      notify.SenderDown(errors.New("dial tcp: connection refused")),
		"throttled": notify.Throttled(errors.New("429 Too Many Requests"), 200*time.Millisecond),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := &fakeStore{}
			snd := &destSender{down: map[string]error{"bad.example": fail}, sends: map[string]int{}}
			w, err := worker.New(nil, store, map[string]worker.Channel{"webhook": {Sender: snd}},
				worker.Config{StoreBackoff: time.Millisecond, SenderBackoff: 50 * time.Millisecond, SenderBackoffMax: 400 * time.Millisecond,
					MaxRetries: 0})
			require.NoError(t, err)

			// A transport: each delivery is handled again until it settles
			// otherwise than by a release.
			run := func(d *fakeDelivery) <-chan struct{} {
				done := make(chan struct{})
				go func() {
					defer close(done)
					for {
						w.Handle(context.Background(), d)
						if h := d.hows(); h[len(h)-1] != "release" {
							return
						}
					}
				}()
				return done
			}
			var bad []*fakeDelivery
			var badDone []<-chan struct{}
			for i := range 4 {
				d := &fakeDelivery{msg: messageOn(t, int64(100+i), "webhook", "https://bad.example/hook/"+strconv.Itoa(i))}
				bad = append(bad, d)
				badDone = append(badDone, run(d))
			}
			require.Eventually(t, func() bool { return w.PausedDestinations("webhook") == 1 }, 5*time.Second, time.Millisecond)
			for i := range 20 {
				d := &fakeDelivery{msg: messageOn(t, int64(200+i), "webhook", "https://good.example/hook")}
				select {
				case <-run(d):
				case <-time.After(5 * time.Second):
					t.Fatal("a delivery to another destination waited for the failing one")
				}
				require.Equal(t, []string{"ack"}, d.hows())
			}
			require.Equal(t, 20, snd.count("good.example"))
			up, _ := w.ChannelStatus("webhook")
			require.True(t, up, "the channel stays up")
			require.Equal(t, 1, w.PausedDestinations("webhook"))
			for _, d := range bad {
				require.NotContains(t, d.hows(), "ack")
			}
			// The gate spares the destination: a first failure, then one
			// trial per backoff, not a send per redelivery.
			released := func() int {
				n := 0
				for _, d := range bad {
					n += len(d.hows())
				}
				return n
			}
			require.Eventually(t, func() bool { return released() >= 20 }, 5*time.Second, time.Millisecond)
			require.Less(t, 2*snd.count("bad.example"), released(), "most deliveries handed back without a send")

			snd.set("bad.example", nil)
			for _, done := range badDone {
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					t.Fatal("the destination's deliveries did not resume")
				}
			}
			for _, d := range bad {
				h := d.hows()
				require.Equal(t, "ack", h[len(h)-1])
			}
			require.Zero(t, w.PausedDestinations("webhook"), "an open gate is dropped")
			for _, r := range store.recs() {
				require.NotEqual(t, notify.AttemptRetry, r.outcome, "no attempt spent")
				require.NotEqual(t, notify.AttemptDead, r.outcome, "nothing dead-lettered")
			}
		})
	}
}

// blockingSender holds every send until release is closed, counting the
// sends under way at once.
type blockingSender struct {
	release chan struct{}
	mu      sync.Mutex
	now     int
	peak    int
	started int
}

func (s *blockingSender) Send(ctx context.Context, _ notify.Outgoing) error {
	s.mu.Lock()
	s.now++
	s.started++
	s.peak = max(s.peak, s.now)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.now--
		s.mu.Unlock()
	}()
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *blockingSender) counts() (started, peak int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started, s.peak
}

// A channel's concurrency bounds its own sends under way, whatever the
// transport hands over at once; another channel is not held by it.
func TestChannelConcurrency(t *testing.T) {
	t.Parallel()
	hook := &blockingSender{release: make(chan struct{})}
	mail := &fakeSender{}
	w, err := worker.New(nil, &fakeStore{}, map[string]worker.Channel{
		"webhook": {Sender: hook, Concurrency: 2},
		"email":   {Sender: mail},
	}, worker.Config{StoreBackoff: time.Millisecond})
	require.NoError(t, err)
	var wg sync.WaitGroup
	var ds []*fakeDelivery
	for i := range 6 {
		d := &fakeDelivery{msg: messageOn(t, int64(300+i), "webhook", "https://example.com/hook")}
		ds = append(ds, d)
		wg.Go(func() { w.Handle(context.Background(), d) })
	}
	require.Eventually(t, func() bool { started, _ := hook.counts(); return started == 2 }, 5*time.Second, time.Millisecond)
	// The other channel goes on while webhook's slots are taken.
	d := &fakeDelivery{msg: message(t, 0)}
	w.Handle(context.Background(), d)
	require.Equal(t, []string{"ack"}, d.hows())
	started, _ := hook.counts()
	require.Equal(t, 2, started, "no third webhook send while two are under way")
	close(hook.release)
	wg.Wait()
	started, peak := hook.counts()
	require.Equal(t, 6, started)
	require.Equal(t, 2, peak)
	for _, d := range ds {
		require.Equal(t, []string{"ack"}, d.hows())
	}
}

// heldAck is a delivery whose acknowledgement waits until release closes.
type heldAck struct {
	*fakeDelivery
	release chan struct{}
}

func (d heldAck) Ack(ctx context.Context) error {
	<-d.release
	return d.fakeDelivery.Ack(ctx)
}

// Config.Sends bounds the sends under way over every channel, and a
// delivery gives its slot back when its send returns: one whose outcome is
// still being acknowledged holds none, so the next deliveries send.
func TestSendsBoundSendsNotSettlement(t *testing.T) {
	t.Parallel()
	hook := &blockingSender{release: make(chan struct{})}
	mail := &blockingSender{release: make(chan struct{})}
	w, err := worker.New(nil, &fakeStore{}, map[string]worker.Channel{
		"webhook": {Sender: hook},
		"email":   {Sender: mail},
	}, worker.Config{Sends: 2, StoreBackoff: time.Millisecond})
	require.NoError(t, err)
	acks := make(chan struct{})
	var wg sync.WaitGroup
	var ds []*fakeDelivery
	handle := func(d *fakeDelivery) {
		ds = append(ds, d)
		wg.Go(func() { w.Handle(context.Background(), heldAck{d, acks}) })
	}
	for i := range 2 {
		handle(&fakeDelivery{msg: messageOn(t, int64(400+i), "webhook", "https://example.com/hook")})
	}
	require.Eventually(t, func() bool { started, _ := hook.counts(); return started == 2 }, 5*time.Second, time.Millisecond)
	for i := range 2 {
		handle(&fakeDelivery{msg: messageOn(t, int64(410+i), "email", "user@example.com")})
	}
	require.Never(t, func() bool { started, _ := mail.counts(); return started > 0 }, 100*time.Millisecond, time.Millisecond,
		"no email send while two webhook sends hold both slots")

	// The webhook sends return; their acknowledgements are held, and the
	// emails take the slots.
	close(hook.release)
	require.Eventually(t, func() bool { started, _ := mail.counts(); return started == 2 }, 5*time.Second, time.Millisecond,
		"the emails send while the webhooks' acknowledgements are held")
	for _, d := range ds {
		require.Empty(t, d.hows(), "nothing acknowledged yet")
	}
	_, hookPeak := hook.counts()
	require.Equal(t, 2, hookPeak)

	close(mail.release)
	close(acks)
	wg.Wait()
	_, mailPeak := mail.counts()
	require.Equal(t, 2, mailPeak)
	for _, d := range ds {
		require.Equal(t, []string{"ack"}, d.hows())
	}
}
