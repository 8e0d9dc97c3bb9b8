package relay_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/sender/webhook"
	"github.com/heraldhq/herald/internal/store/sqlite"
	"github.com/heraldhq/herald/internal/testkit/deliverytest"
	"github.com/heraldhq/herald/internal/testkit/testlog"
)

var (
	_ relay.EventPublisher = (*webhook.StatusPublisher)(nil)
	_ relay.Publisher      = (*relay.Retrier)(nil)
)

// statusReceiver is the operator's status endpoint: it answers each
// request as answer says for the event's notification and the number of
// requests that notification has had so far (1 for the first), and
// records when each request came and when each notification was first
// accepted.
type statusReceiver struct {
	answer func(notificationID string, n int, w http.ResponseWriter) bool

	mu       sync.Mutex
	requests map[string][]time.Time
	accepted map[string]time.Time
}

func (r *statusReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	var b webhook.StatusBody
	if err := json.Unmarshal(body, &b); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	ev, err := notify.DecodeStatus(b.Data)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	now := time.Now()
	r.mu.Lock()
	r.requests[ev.NotificationID] = append(r.requests[ev.NotificationID], now)
	n := len(r.requests[ev.NotificationID])
	r.mu.Unlock()
	if !r.answer(ev.NotificationID, n, w) {
		return
	}
	w.WriteHeader(http.StatusNoContent)
	r.mu.Lock()
	if _, ok := r.accepted[ev.NotificationID]; !ok {
		r.accepted[ev.NotificationID] = now
	}
	r.mu.Unlock()
}

func (r *statusReceiver) snapshot(id string) (requests []time.Time, accepted int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.requests[id]...), len(r.accepted)
}

// refuseSecond picks the refused event: the second one the receiver
// sees, the oldest row but one, once the sink has accepted an event (a
// sink that accepted nothing yet is in an outage, where refusals spend no
// attempt).
type refuseSecond struct {
	mu      sync.Mutex
	first   string
	refused string
}

func (p *refuseSecond) is(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.first == "":
		p.first = id
	case p.refused == "" && id != p.first:
		p.refused = id
	}
	return id == p.refused
}

func (p *refuseSecond) id() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

// statusBroker is the broker's side of the fan-out: it confirms every
// event and records when it first got each notification's.
type statusBroker struct {
	mu  sync.Mutex
	got map[string]time.Time
}

func (b *statusBroker) Publish(_ context.Context, evs []notify.Event) ([]int64, error) {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range evs {
		ev, err := notify.DecodeStatus(e.Payload)
		if err != nil {
			continue
		}
		if _, ok := b.got[ev.NotificationID]; !ok {
			b.got[ev.NotificationID] = now
		}
	}
	return ids(evs), nil
}

// statusRig is a status relay as herald builds it (the broker and the
// status webhook behind a fan-out, the webhook's refusals retried per
// event) over a real SQLite store and a real HTTP receiver.
type statusRig struct {
	s        *sqlite.Store
	recv     *statusReceiver
	broker   *statusBroker
	reg      *prometheus.Registry
	logs     testlog.Buffer
	notified []string // notification ids, in the order their status events commit
	// committed is when each notification's status event committed.
	committed map[string]time.Time
}

// runStatusRig creates n notifications, starts the status relay, then
// delivers them one every pace (the worker's records arriving while the
// relay runs: the first one's status event is the oldest row), and
// returns once they are all delivered; the relay runs until the test
// ends.
func runStatusRig(t *testing.T, n int, pace time.Duration, retry relay.RetryConfig, answer func(string, int, http.ResponseWriter) bool) *statusRig {
	t.Helper()
	return runStatusRigBatch(t, 0, n, pace, retry, answer)
}

// runStatusRigBatch is runStatusRig with the relay's batch size (0: the
// default).
func runStatusRigBatch(t *testing.T, batch, n int, pace time.Duration, retry relay.RetryConfig, answer func(string, int, http.ResponseWriter) bool) *statusRig {
	t.Helper()
	ctx := t.Context()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "herald.db"), sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.NoError(t, s.Migrate(ctx))
	rig := &statusRig{s: s, reg: prometheus.NewRegistry(), committed: map[string]time.Time{},
		recv:   &statusReceiver{answer: answer, requests: map[string][]time.Time{}, accepted: map[string]time.Time{}},
		broker: &statusBroker{got: map[string]time.Time{}}}

	for range n {
		_, err := s.Create(ctx, notify.NewNotification{Request: notify.CreateRequest{
			UserID: "u", Channel: notify.ChannelEmail, To: "a@example.com", Subject: "s", Body: "b"}})
		require.NoError(t, err)
	}
	var requested []notify.Event
	_, err = relay.Batch(ctx, s, n, []string{notify.EventRequested}, func(_ context.Context, evs []notify.Event) ([]int64, error) {
		requested = append(requested, evs...)
		return ids(evs), nil
	})

	require.NoError(t, err)
	require.Len(t, requested, n)

	srv := httptest.NewServer(rig.recv)
	t.Cleanup(srv.Close)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	hook, err := webhook.NewStatusPublisher(webhook.StatusConfig{URL: srv.URL + "/status",
		Secret: "whsec_" + base64.StdEncoding.EncodeToString(key), Timeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = hook.Close() })
	retry.Logger = slog.New(slog.NewTextHandler(&rig.logs, nil))
	retry.Registerer = rig.reg
	retrier, err := relay.NewRetrier(hook, retry)
	require.NoError(t, err)
	fan, err := relay.NewFanOut(rig.broker, retrier)
	require.NoError(t, err)
	r, err := relay.New(s, fan, s, relay.Config{Batch: batch, Types: notify.StatusEventTypes, Name: "status",
		Interval: 50 * time.Millisecond, Registerer: rig.reg})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	// The worker's records, at a steady rate (a load, not a wait).
	tick := time.NewTicker(pace)
	defer tick.Stop()
	for _, e := range requested {
		var req notify.Requested
		require.NoError(t, json.Unmarshal(e.Payload, &req))
		nid, err := strconv.ParseInt(req.NotificationID, 10, 64)
		require.NoError(t, err)
		out, err := deliverytest.Deliver(ctx, s, e.ID, nid, func(context.Context) error { return nil })
		require.NoError(t, err)
		require.Equal(t, notify.OutcomeSent, out)
		rig.committed[req.NotificationID] = time.Now()
		rig.notified = append(rig.notified, req.NotificationID)
		<-tick.C
	}
	return rig
}

// waitOthers polls until every notification but refused reached both the
// status webhook and the broker, and returns the longest time one of
// them took from its commit, at either.
func (rig *statusRig) waitOthers(t *testing.T, refused string, within time.Duration) time.Duration {
	t.Helper()
	require.Eventually(t, func() bool {
		_, accepted := rig.recv.snapshot(refused)
		rig.broker.mu.Lock()
		defer rig.broker.mu.Unlock()
		return accepted >= len(rig.notified)-1 && len(rig.broker.got) == len(rig.notified)
	}, within, 10*time.Millisecond, "the other status events reached the webhook and the broker")
	rig.recv.mu.Lock()
	defer rig.recv.mu.Unlock()
	rig.broker.mu.Lock()
	defer rig.broker.mu.Unlock()
	var worst time.Duration
	for _, id := range rig.notified {
		if id == refused {
			continue
		}
		at, ok := rig.recv.accepted[id]
		require.True(t, ok, "notification %s accepted by the webhook", id)
		worst = max(worst, at.Sub(rig.committed[id]), rig.broker.got[id].Sub(rig.committed[id]))
	}
	return worst
}

// waitSettled polls until the outbox has nothing left to relay.
func (rig *statusRig) waitSettled(t *testing.T, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		st, err := rig.s.OutboxStats(t.Context())
		return err == nil && st.Unprocessed+st.Scheduled == 0
	}, within, 10*time.Millisecond, "every status event relayed or dead-lettered")
}

func (rig *statusRig) deadLetters(t *testing.T) float64 {
	t.Helper()
	return metricValue(t, rig.reg, "herald_relay_dead_letters_total")
}

// metricValue is the value of the counter or gauge name (one series).
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// Defect (issue 32, point 7): one status event the status webhook always
// refuses was offered again with every batch and failed every batch, so
// the relay backed off (up to 5s) between batches for ever: every other
// status event, and the broker's copy through the fan-out, went at about
// one batch per 5s (status events committed at a steady rate waited up to
// 1.6s within the first 3s). Now the refused one waits for its own
// retries, then is dead-lettered, and the others go as they come.
func TestStatusWebhookRefusingOneEventHoldsUpNoOther(t *testing.T) {
	t.Parallel()
	const n, maxRetries = 200, 3
	pick := &refuseSecond{}
	rig := runStatusRig(t, n, 15*time.Millisecond, relay.RetryConfig{MaxRetries: maxRetries, Delays: []time.Duration{200 * time.Millisecond}},
		func(id string, _ int, w http.ResponseWriter) bool {
			if pick.is(id) {
				w.WriteHeader(http.StatusInternalServerError)
				return false
			}
			return true
		})
	refused := pick.id()
	require.Equal(t, rig.notified[1], refused)

	worst := rig.waitOthers(t, refused, 20*time.Second)
	t.Logf("%d other status events at %s each: the slowest reached the webhook or the broker %s after its commit", n-1, 15*time.Millisecond, worst)
	require.Less(t, worst, time.Second, "the refused event held up the others")

	rig.waitSettled(t, 20*time.Second)
	reqs, _ := rig.recv.snapshot(refused)
	require.Len(t, reqs, maxRetries+1, "the first attempt and its retries, then dead-lettered")
	for i := 1; i < len(reqs); i++ {
		require.GreaterOrEqual(t, reqs[i].Sub(reqs[i-1]), 200*time.Millisecond, "retry %d came before its delay", i)
	}
	require.Equal(t, 1.0, rig.deadLetters(t))
	require.Contains(t, rig.logs.String(), "level=ERROR")
	require.Contains(t, rig.logs.String(), "notification_id="+refused)
	require.Contains(t, rig.logs.String(), "attempts=4")
	require.Contains(t, rig.logs.String(), "status 500")
	rig.broker.mu.Lock()
	_, ok := rig.broker.got[refused]
	rig.broker.mu.Unlock()
	require.True(t, ok, "the broker has the refused event's copy")
	// Settled means gone from the outbox: nothing offers it again.
	require.Zero(t, metricValue(t, rig.reg, "herald_relay_parked_events"))
}

// More refused events than a batch holds, all waiting for a retry a
// minute away: the relay's claims pass over them (they are the oldest
// rows, claimed first), so the others still go as they come. Claiming
// only a batch, the parked rows would fill it and nothing else would move
// until their retries.
func TestStatusWebhookManyParkedEventsHoldUpNoOther(t *testing.T) {
	t.Parallel()
	const batch, refusedN, n = 10, 30, 130
	var (
		mu      sync.Mutex
		first   string
		refused = map[string]bool{}
	)
	// The first event is accepted (the sink is up), the next refusedN are
	// refused: the oldest rows.
	rig := runStatusRigBatch(t, batch, n, 10*time.Millisecond, relay.RetryConfig{MaxRetries: 5, Delays: []time.Duration{time.Minute}},
		func(id string, _ int, w http.ResponseWriter) bool {
			mu.Lock()
			defer mu.Unlock()
			if first == "" {
				first = id
			}
			if id != first && !refused[id] && len(refused) < refusedN {
				refused[id] = true
			}
			if refused[id] {
				w.WriteHeader(http.StatusBadGateway)
				return false
			}
			return true
		})
	require.Eventually(t, func() bool {
		_, accepted := rig.recv.snapshot("")
		rig.broker.mu.Lock()
		defer rig.broker.mu.Unlock()
		return accepted >= n-refusedN && len(rig.broker.got) == n
	}, 20*time.Second, 10*time.Millisecond, "the other status events reached the webhook and the broker")
	rig.recv.mu.Lock()
	var worst time.Duration
	for id, at := range rig.recv.accepted {
		worst = max(worst, at.Sub(rig.committed[id]))
	}
	for id := range refused {
		require.Len(t, rig.recv.requests[id], 1, "notification %s retried before its delay", id)
	}
	rig.recv.mu.Unlock()
	t.Logf("%d others beside %d parked rows (batch %d): the slowest reached the webhook %s after its commit", n-refusedN, refusedN, batch, worst)
	require.Less(t, worst, time.Second, "the parked rows held up the others")
	require.Equal(t, float64(refusedN), metricValue(t, rig.reg, "herald_relay_parked_events"))
	// The sinks have every other event before their batch is marked: the
	// count of rows left settles to the parked ones.
	require.Eventually(t, func() bool {
		st, err := rig.s.OutboxStats(t.Context())
		require.NoError(t, err)
		return st.Unprocessed+st.Scheduled == refusedN
	}, 10*time.Second, 10*time.Millisecond, "the parked rows wait in the outbox, unprocessed, and only they")
}

// Each kind of refusal, one event among others: a 4xx but 408 and 429 is
// permanent (dead-lettered at its first request); a 503 or a 408 is
// retried up to the limit; a 429 with Retry-After delays only that event
// for the wait asked and spends no attempt (accepted later with no
// retries allowed). The others are never held up.
func TestStatusWebhookRefusals(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		maxRetries int
		answer     func(n int, w http.ResponseWriter) bool
		requests   int
		dead       bool
		// gap is the least time between the refused event's requests.
		gap time.Duration
	}{
		{name: "400 permanent", maxRetries: 5, requests: 1, dead: true,
			answer: func(_ int, w http.ResponseWriter) bool { w.WriteHeader(http.StatusBadRequest); return false }},
		{name: "410 permanent", maxRetries: 5, requests: 1, dead: true,
			answer: func(_ int, w http.ResponseWriter) bool { w.WriteHeader(http.StatusGone); return false }},
		{name: "503 retried", maxRetries: 2, requests: 3, dead: true, gap: 100 * time.Millisecond,
			answer: func(_ int, w http.ResponseWriter) bool { w.WriteHeader(http.StatusServiceUnavailable); return false }},
		{name: "408 retried", maxRetries: 1, requests: 2, dead: true, gap: 100 * time.Millisecond,
			answer: func(_ int, w http.ResponseWriter) bool { w.WriteHeader(http.StatusRequestTimeout); return false }},
		{name: "429 waits for its Retry-After", maxRetries: 0, requests: 3, dead: false, gap: 900 * time.Millisecond,
			answer: func(n int, w http.ResponseWriter) bool {
				if n < 3 {
					w.Header().Set("Retry-After", "1")
					w.WriteHeader(http.StatusTooManyRequests)
					return false
				}
				return true
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pick := &refuseSecond{}
			rig := runStatusRig(t, 40, 20*time.Millisecond, relay.RetryConfig{MaxRetries: tc.maxRetries, Delays: []time.Duration{100 * time.Millisecond}},
				func(id string, n int, w http.ResponseWriter) bool {
					if !pick.is(id) {
						return true
					}
					return tc.answer(n, w)
				})
			refused := pick.id()
			worst := rig.waitOthers(t, refused, 20*time.Second)
			require.Less(t, worst, time.Second, "the refused event held up the others")
			rig.waitSettled(t, 20*time.Second)
			reqs, _ := rig.recv.snapshot(refused)
			require.Len(t, reqs, tc.requests)
			for i := 1; i < len(reqs); i++ {
				require.GreaterOrEqual(t, reqs[i].Sub(reqs[i-1]), tc.gap, "request %d of the refused event came too soon", i+1)
			}
			rig.recv.mu.Lock()
			_, accepted := rig.recv.accepted[refused]
			rig.recv.mu.Unlock()
			require.Equal(t, !tc.dead, accepted)
			if tc.dead {
				require.Equal(t, 1.0, rig.deadLetters(t))
				require.Contains(t, rig.logs.String(), "notification_id="+refused)
			} else {
				require.Zero(t, rig.deadLetters(t))
			}
		})
	}
}
