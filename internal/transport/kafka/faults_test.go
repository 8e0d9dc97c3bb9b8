package kafka_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/testlog"
	"github.com/heraldhq/herald/internal/transport/kafka"
	"github.com/heraldhq/herald/internal/worker"
)

// recordingSender is a mail server stand-in that takes a random time per
// send (up to maxLatency) and records the order in which sends finished,
// by subject.
type recordingSender struct {
	maxLatency time.Duration

	mu    sync.Mutex
	sent  []string
	count map[string]int
}

func (s *recordingSender) Send(ctx context.Context, e notify.Outgoing) error {
	if s.maxLatency > 0 {
		t := time.NewTimer(rand.N(s.maxLatency))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.count == nil {
		s.count = map[string]int{}
	}
	s.sent = append(s.sent, e.Subject)
	s.count[e.Subject]++
	return nil
}

func (s *recordingSender) subjects() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.sent...)
}

func (s *recordingSender) counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.count))
	for k, v := range s.count {
		out[k] = v
	}
	return out
}

// runWorker runs a real worker on a fresh consumer of p until the test
// ends or the returned stop is called; reg holds its metrics.
func runWorker(t *testing.T, p pipeline, cfg kafka.Config, s worker.Sender) (reg *prometheus.Registry, stop func()) {
	t.Helper()
	src, err := kafka.NewConsumer(cfg)
	require.NoError(t, err)
	reg = prometheus.NewRegistry()
	w, err := worker.New(src, p.store, map[string]worker.Channel{notify.ChannelEmail: {Sender: s}}, worker.Config{
		MaxRetries: 2, StoreBackoff: 100 * time.Millisecond, Registerer: reg,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				assert.NoError(t, err, "worker")
			case <-time.After(waitFor):
				t.Error("worker did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return reg, stop
}

// outcomes reads herald_worker_deliveries_total by outcome.
func outcomes(t require.TestingT, reg *prometheus.Registry) map[string]float64 {
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "herald_worker_deliveries_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					out[l.GetValue()] += m.GetCounter().GetValue() // summed over channels
				}
			}
		}
	}
	return out
}

// create stores n notifications for user, subjects prefix-000, prefix-001,
// ... in create order.
func create(t *testing.T, p pipeline, user, prefix string, n int) []notify.Notification {
	t.Helper()
	out := make([]notify.Notification, n)
	for i := range out {
		c, err := p.store.Create(t.Context(), notify.NewNotification{Request: notify.CreateRequest{
			UserID:  user,
			Channel: notify.ChannelEmail,
			To:      user + "@example.com",
			Subject: fmt.Sprintf("%s-%03d", prefix, i),
			Body:    "body",
		}})
		require.NoError(t, err)
		out[i] = c.Notification
	}
	return out
}

// waitSent waits until every one of ns is sent.
func waitSent(t *testing.T, p pipeline, ns []notify.Notification) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, n := range ns {
			g, err := p.store.Get(t.Context(), n.ID)
			require.NoError(c, err)
			require.Equal(c, notify.StatusSent, g.Status, "notification %d (%s)", n.ID, n.Subject)
		}
	}, 2*waitFor, 50*time.Millisecond)
}

// oneEach requires that the sender sent every one of ns exactly once.
func oneEach(t *testing.T, s *recordingSender, ns ...[]notify.Notification) {
	t.Helper()
	want := map[string]int{}
	for _, group := range ns {
		for _, n := range group {
			want[n.Subject] = 1
		}
	}
	require.Equal(t, want, s.counts(), "sends by subject")
}

// One user's notifications reach the mail server in create order, though
// sends take a random time and the worker runs eight at once; other users'
// run beside them.
func TestPerUserOrder(t *testing.T) {
	t.Parallel()
	p := pipelineHarness(t, newCluster(t, 3))
	p.Pump(t, t.Context())
	cfg := p.cfg
	cfg.Prefetch = 8
	snd := &recordingSender{maxLatency: 15 * time.Millisecond}
	runWorker(t, p, cfg, snd)

	var mine, others []notify.Notification
	for round := range 5 {
		mine = append(mine, create(t, p, "alice", fmt.Sprintf("alice-%d", round), 8)...)
		for u := range 4 {
			others = append(others, create(t, p, fmt.Sprintf("user%d", u), fmt.Sprintf("user%d-%d", u, round), 2)...)
		}
	}
	waitSent(t, p, append(append([]notify.Notification(nil), mine...), others...))
	oneEach(t, snd, mine, others)

	var got []string
	for _, s := range snd.subjects() {
		if strings.HasPrefix(s, "alice-") {
			got = append(got, s)
		}
	}
	want := make([]string, len(mine))
	for i, n := range mine {
		want[i] = n.Subject
	}
	require.Equal(t, want, got, "alice's notifications were sent out of create order")
}

// A broker is killed mid-run (its listener and every connection gone, its
// partitions and the group coordinator moving to the others): nothing is
// lost and nothing is sent twice.
func TestBrokerKilledMidRun(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	p := pipelineHarness(t, c)
	p.Pump(t, t.Context())
	cfg := p.cfg
	cfg.Prefetch = 8
	snd := &recordingSender{maxLatency: 5 * time.Millisecond}
	runWorker(t, p, cfg, snd)

	before := create(t, p, "u", "before", 60)
	require.Eventually(t, func() bool { return len(snd.subjects()) >= 20 }, waitFor, 10*time.Millisecond,
		"nothing was sent before the kill")
	// The group coordinator: killing it disrupts produce, fetch and commit.
	victim := c.CoordinatorFor(cfg.Topics().Group)
	require.GreaterOrEqual(t, victim, int32(0))
	c.kill(t, victim)
	after := create(t, p, "v", "after", 60)

	waitSent(t, p, append(append([]notify.Notification(nil), before...), after...))
	oneEach(t, snd, before, after)
}

// A second worker joins the group mid-run and takes partitions over: every
// notification is sent once. The first worker commits only what it settled
// and lets its in-flight deliveries settle before handing a partition over,
// so the newcomer skips no record. A repeat can still reach it (a relay
// re-publishes an event whose ack came late on a loaded machine, a handover
// outlasts the grace): at-least-once allows that, and the store absorbs it
// as a duplicate, which is what is asserted: one send each.
func TestRebalance(t *testing.T) {
	t.Parallel()
	p := pipelineHarness(t, newCluster(t, 3))
	p.Pump(t, t.Context())
	cfg := p.cfg
	cfg.Prefetch = 4
	snd := &recordingSender{maxLatency: 20 * time.Millisecond}
	regA, _ := runWorker(t, p, cfg, snd)

	var ns []notify.Notification
	for u := range 12 {
		ns = append(ns, create(t, p, fmt.Sprintf("user%d", u), fmt.Sprintf("user%02d", u), 15)...)
	}
	require.Eventually(t, func() bool { return len(snd.subjects()) >= 30 }, waitFor, 10*time.Millisecond,
		"the first worker sent nothing")
	regB, _ := runWorker(t, p, cfg, snd)
	// Load goes on until the newcomer has partitions and sends.
	round := 0
	require.Eventually(t, func() bool {
		for u := range 12 {
			ns = append(ns, create(t, p, fmt.Sprintf("user%d", u), fmt.Sprintf("user%02d-late%02d", u, round), 1)...)
		}
		round++
		return outcomes(t, regB)["sent"] > 0
	}, waitFor, 50*time.Millisecond, "the second worker never got a partition")
	waitSent(t, p, ns)
	oneEach(t, snd, ns)
	a, b := outcomes(t, regA), outcomes(t, regB)
	require.Equal(t, float64(len(ns)), a["sent"]+b["sent"])
	t.Logf("repeats absorbed as duplicates: %v", a["duplicate"]+b["duplicate"])
}

// The requested topic deleted mid-run comes back: the publisher and the
// consumer recreate it with an ERROR saying so, and delivery goes on.
func TestTopicDeletedMidRun(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	var logs testlog.Buffer
	cfg := c.config("")
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	pub := newPublisher(t, cfg)
	src, err := kafka.NewConsumer(cfg)
	require.NoError(t, err)

	var (
		mu  sync.Mutex
		got = map[int64]bool{}
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- src.Consume(ctx, func(ctx context.Context, d notify.Delivery) {
			if assert.NoError(t, d.Ack(ctx)) {
				mu.Lock()
				got[d.Message().ID] = true
				mu.Unlock()
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	received := func(id int64) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return got[id]
		}
	}
	ev := func(id int64) notify.Event {
		return notify.Event{ID: id, Type: notify.EventRequested, OccurredAt: time.Now(),
			Payload: fmt.Appendf(nil, `{"notification_id":"%d","user_id":"same-user"}`, id)}
	}

	confirmed, err := pub.Publish(t.Context(), []notify.Event{ev(1), ev(2), ev(3)})
	require.NoError(t, err)
	require.Equal(t, []int64{1, 2, 3}, confirmed)
	require.Eventually(t, received(3), waitFor, 10*time.Millisecond, "nothing consumed before the deletion")

	cl, err := kgo.NewClient(cfg.ConnOpts()...)
	require.NoError(t, err)
	defer cl.Close()
	resps, err := kadm.NewClient(cl).DeleteTopics(t.Context(), cfg.Topics().Requested)
	require.NoError(t, err)
	require.NoError(t, resps.Error())

	// The relay retries a failed publish; so does this loop.
	require.Eventually(t, func() bool {
		confirmed, err := pub.Publish(t.Context(), []notify.Event{ev(4)})
		return err == nil && len(confirmed) == 1
	}, waitFor, 100*time.Millisecond, "publishing after the deletion never succeeded")
	require.Eventually(t, received(4), waitFor, 10*time.Millisecond,
		"the record published after the deletion was never consumed")
	require.Contains(t, logs.String(), "level=ERROR")
	require.Contains(t, logs.String(), "recreated it")
}

// Records that are not herald's are dead-lettered with the reason: one
// without a message id by the transport, one with an id but a payload that
// is not an event by the worker; delivery goes on behind them.
func TestForeignRecords(t *testing.T) {
	t.Parallel()
	p := pipelineHarness(t, newCluster(t, 3))
	p.Pump(t, t.Context())
	snd := &recordingSender{}
	runWorker(t, p, p.cfg, snd)

	cl, err := kgo.NewClient(p.cfg.ConnOpts()...)
	require.NoError(t, err)
	defer cl.Close()
	topic := p.cfg.Topics().Requested
	require.NoError(t, kafka.EnsureTopics(t.Context(), p.cfg))
	res := cl.ProduceSync(t.Context(),
		&kgo.Record{Topic: topic, Key: []byte("someone"), Value: []byte("hello")},
		&kgo.Record{Topic: topic, Key: []byte("someone"), Value: []byte(`{"what":"ever"}`), Headers: []kgo.RecordHeader{
			{Key: kafka.HeaderMessageID, Value: []byte("987654")},
			{Key: kafka.HeaderType, Value: []byte(notify.EventRequested)},
		}},
	)
	require.NoError(t, res.FirstErr())
	ns := create(t, p, "someone", "after", 3)
	waitSent(t, p, ns)
	oneEach(t, snd, ns)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		reasons := map[string]string{}
		for _, r := range readTopic(t, p.cfg, p.cfg.Topics().DeadLetters) {
			reasons[header(r, kafka.HeaderMessageID)] = header(r, kafka.HeaderLastError)
		}
		require.Len(c, reasons, 2)
		require.Contains(c, reasons[""], "not a herald message")
		require.Contains(c, reasons["987654"], "decode payload")
	}, waitFor, 100*time.Millisecond, "dead letters")
}
