package nats_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/testenv"
	"github.com/heraldhq/herald/internal/testkit/testlog"
	natstr "github.com/heraldhq/herald/internal/transport/nats"
)

const (
	wait = 30 * time.Second
	tick = 20 * time.Millisecond
)

// events returns the events with ids from..to, as the relay publishes them.
func events(t *testing.T, from, to int64) []notify.Event {
	t.Helper()
	at := time.Now().UTC().Truncate(time.Microsecond)
	var evs []notify.Event
	for id := from; id <= to; id++ {
		payload, err := json.Marshal(notify.Requested{
			NotificationID: notify.FormatID(id),
			UserID:         fmt.Sprintf("user-%d", id),
			Channel:        notify.ChannelEmail,
			To:             fmt.Sprintf("someone-%d@example.com", id),
			Subject:        "Hello",
			Body:           "Body",
		})
		require.NoError(t, err)
		evs = append(evs, notify.Event{ID: id, Type: notify.EventRequested, Payload: payload, OccurredAt: at})
	}
	return evs
}

// record is a handler's journal.
type record struct {
	mu   sync.Mutex
	seen map[int64]int
	msgs []notify.Message
	at   []time.Time
}

func (r *record) add(m notify.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[int64]int{}
	}
	r.seen[m.ID]++
	r.msgs = append(r.msgs, m)
	r.at = append(r.at, time.Now())
}

func (r *record) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func (r *record) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

// runConsumer runs a Consumer with handle until the test ends, and fails the
// test if Consume returns an error.
func runConsumer(t *testing.T, cfg natstr.Config, handle notify.Handler) (stop func()) {
	t.Helper()
	c, err := natstr.NewConsumer(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Consume(ctx, handle) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				assert.NoError(t, err, "Consume")
			case <-time.After(wait):
				t.Error("Consume did not return after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// acking records every delivery and acknowledges it.
func acking(t *testing.T, r *record) notify.Handler {
	return func(ctx context.Context, d notify.Delivery) {
		if err := d.Ack(ctx); err == nil {
			r.add(d.Message())
		}
	}
}

// A server stopped while events are being published and consumed, and
// started again on the same port and store, loses nothing: every event is
// delivered and acknowledged.
func TestServerRestartMidRun(t *testing.T) {
	srv := testenv.StartNATS(t, testenv.NATSOptions{})
	cfg := config(t, srv)
	// A delivery whose settlement was lost with the connection comes back
	// after the ack wait.
	cfg.AckWait = 2 * time.Second
	const total = 600
	pub := newPublisher(t, cfg)

	var r record
	runConsumer(t, cfg, acking(t, &r))

	var (
		mu       sync.Mutex
		failures int
	)
	publishDone := make(chan struct{})
	go func() {
		defer close(publishDone)
		for from := int64(1); from <= total; from += 20 {
			// Keep publishing and consuming interleaved, so that the
			// restart hits both: at most a few batches ahead.
			for r.distinct() < int(from)-60 && t.Context().Err() == nil {
				time.Sleep(tick)
			}
			pending := events(t, from, from+19)
			for len(pending) > 0 && t.Context().Err() == nil {
				ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
				confirmed, err := pub.Publish(ctx, pending)
				cancel()
				if err != nil {
					mu.Lock()
					failures++
					mu.Unlock()
					time.Sleep(50 * time.Millisecond) // the relay's backoff, in short
				}
				ok := map[int64]bool{}
				for _, id := range confirmed {
					ok[id] = true
				}
				var rest []notify.Event
				for _, ev := range pending {
					if !ok[ev.ID] {
						rest = append(rest, ev)
					}
				}
				pending = rest
			}
		}
	}()

	require.Eventually(t, func() bool { return r.distinct() >= total/4 }, wait, tick, "nothing consumed before the restart")
	srv.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	_, err := pub.Publish(ctx, events(t, total+1, total+1))
	cancel()
	require.Error(t, err, "publish while the server is down")
	srv.Start()

	<-publishDone
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	confirmed, err := pub.Publish(ctx, events(t, total+1, total+1))
	require.NoError(t, err)
	require.Equal(t, []int64{total + 1}, confirmed)
	require.Eventually(t, func() bool { return r.distinct() == total+1 }, 60*time.Second, tick,
		"not every event was delivered after the restart")
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := int64(1); id <= total+1; id++ {
		require.GreaterOrEqual(t, r.seen[id], 1, "event %d lost", id)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("deliveries %d for %d events; %d publish calls of the background publisher failed during the outage", len(r.msgs), total+1, failures)
}

// A server that is not there when the processes start: the publisher fails
// fast (the relay retries), the consumer keeps trying with backoff, and
// both work as soon as the server is up.
func TestUnreachableAtStart(t *testing.T) {
	srv := testenv.StartNATS(t, testenv.NATSOptions{})
	srv.Stop()
	cfg := config(t, srv)
	var logs testlog.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))

	var r record
	runConsumer(t, cfg, acking(t, &r))
	pub := newPublisher(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	began := time.Now()
	_, err := pub.Publish(ctx, events(t, 1, 1))
	cancel()
	require.Error(t, err, "publish without a server")
	require.Less(t, time.Since(began), 5*time.Second, "publish waited instead of failing fast")
	eventually(t, func() bool { return bytes.Count([]byte(logs.String()), []byte("reconnecting")) >= 2 },
		&logs, "the consumer did not keep retrying")

	srv.Start()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		confirmed, err := pub.Publish(ctx, events(t, 1, 1))
		require.NoError(c, err)
		require.Equal(c, []int64{1}, confirmed)
	}, wait, 100*time.Millisecond, "publish after the server came up")
	eventually(t, func() bool { return r.distinct() == 1 }, &logs, "the consumer never got the event")
}

// Wrong credentials are a clear error: the publisher and the readiness
// probe say so, and the consumer logs it at ERROR while it keeps trying.
func TestWrongCredentials(t *testing.T) {
	srv := testenv.StartNATS(t, testenv.NATSOptions{User: "herald", Pass: "right"})
	cfg := config(t, srv) // the cleanup deletes with the right credentials
	bad := cfg
	bad.URL = fmt.Sprintf("nats://herald:wrong@127.0.0.1:%d", srv.Port)
	var logs testlog.Buffer
	bad.Logger = slog.New(slog.NewTextHandler(&logs, nil))

	pub := newPublisher(t, bad)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := pub.Publish(ctx, events(t, 1, 1))
	require.ErrorContains(t, err, "rejected the credentials")
	require.ErrorIs(t, err, natsgo.ErrAuthorization)
	require.NotContains(t, err.Error(), "wrong", "the error quotes the password")

	err = natstr.Pinger{URL: bad.URL}.Ping(ctx)
	require.ErrorContains(t, err, "rejected the credentials")

	runConsumer(t, bad, func(context.Context, notify.Delivery) { t.Error("delivery with wrong credentials") })
	eventually(t, func() bool {
		return bytes.Contains([]byte(logs.String()), []byte("level=ERROR msg=\"nats consumer cannot connect: credentials rejected; retrying\""))
	}, &logs, "no clear error logged")
	require.NotContains(t, logs.String(), "wrong", "the log quotes the password")

	require.NoError(t, natstr.Pinger{URL: cfg.URL}.Ping(ctx), "the right credentials")
}

// The same outbox event published twice within the duplicate window (a
// relay that published and could not mark its batch) is stored and
// delivered once.
func TestDuplicatePublishAbsorbed(t *testing.T) {
	srv := testenv.StartNATS(t, testenv.NATSOptions{})
	cfg := config(t, srv)
	pub := newPublisher(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	evs := events(t, 1, 3)
	for range 2 {
		confirmed, err := pub.Publish(ctx, evs)
		require.NoError(t, err)
		require.Equal(t, ids(evs), confirmed, "a duplicate counts as stored")
	}
	require.Equal(t, uint64(3), subjectCount(t, cfg, cfg.Topology().Requested), "messages stored")

	var r record
	runConsumer(t, cfg, acking(t, &r))
	require.Eventually(t, func() bool { return r.distinct() == 3 }, wait, tick)
	require.Never(t, func() bool { return r.total() != 3 }, time.Second, tick, "a duplicate was delivered")
}

// subjectCount returns how many messages the stream holds on subject.
func subjectCount(t *testing.T, cfg natstr.Config, subject string) uint64 {
	t.Helper()
	nc, err := natsgo.Connect(cfg.URL)
	require.NoError(t, err)
	defer nc.Close()
	reply, err := nc.Request("$JS.API.STREAM.INFO."+cfg.Topology().Stream,
		[]byte(`{"subjects_filter":"`+subject+`"}`), 5*time.Second)
	require.NoError(t, err)
	var info struct {
		State struct {
			Subjects map[string]uint64 `json:"subjects"`
		} `json:"state"`
	}
	require.NoError(t, json.Unmarshal(reply.Data, &info))
	return info.State.Subjects[subject]
}

// A stream deleted by hand while the processes run is declared again: the
// consumer notices its consumer gone and declares both, the publisher
// declares the stream after a publish found none, and delivery goes on.
func TestStreamDeletedMidRun(t *testing.T) {
	srv := testenv.StartNATS(t, testenv.NATSOptions{})
	cfg := config(t, srv)
	var logs testlog.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	pub := newPublisher(t, cfg)
	var r record
	runConsumer(t, cfg, acking(t, &r))

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := pub.Publish(ctx, events(t, 1, 1))
	require.NoError(t, err)
	eventually(t, func() bool { return r.distinct() == 1 }, &logs, "the first message was not delivered")

	require.NoError(t, natstr.Delete(ctx, cfg))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		confirmed, err := pub.Publish(ctx, events(t, 2, 2))
		require.NoError(c, err)
		require.Equal(c, []int64{2}, confirmed)
	}, wait, 100*time.Millisecond, "publish after the stream was deleted")
	eventually(t, func() bool { return r.distinct() == 2 }, &logs, "nothing delivered after the stream was deleted")
	require.Regexp(t, `consumer .* (is gone|consumer deleted)`, logs.String(), "the consumer did not say why it reconnected")
}

// A message on the subject that is not herald's (no message id) is
// dead-lettered with the reason, without reaching the handler.
func TestForeignMessageDeadLettered(t *testing.T) {
	srv := testenv.StartNATS(t, testenv.NATSOptions{})
	cfg := config(t, srv)
	pub := newPublisher(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := pub.Publish(ctx, events(t, 1, 1)) // declares the stream
	require.NoError(t, err)

	nc, err := natsgo.Connect(cfg.URL)
	require.NoError(t, err)
	defer nc.Close()
	_, err = nc.RequestWithContext(ctx, cfg.Topology().Requested, []byte("hello, not herald"))
	require.NoError(t, err)

	var r record
	runConsumer(t, cfg, acking(t, &r))
	require.Eventually(t, func() bool { return len(peek(t, cfg)) == 1 }, wait, tick, "no dead letter")
	dl := peek(t, cfg)[0]
	require.Zero(t, dl.ID)
	require.Contains(t, dl.Reason, "not a herald message")
	require.Eventually(t, func() bool { return r.distinct() == 1 }, wait, tick)
	require.Never(t, func() bool { return r.total() != 1 }, time.Second, tick, "the foreign message reached the handler")
	require.Equal(t, uint64(0), subjectCount(t, cfg, cfg.Topology().Requested), "left on the send subject")
}

// herald dlq redrive's operations: the count of dead letters, and the
// removal of the ones redriven, leaving the others.
func TestDeadLetterCountAndRemove(t *testing.T) {
	srv := testenv.StartNATS(t, testenv.NATSOptions{})
	cfg := config(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	n, err := natstr.DeadLetterCount(ctx, cfg)
	require.NoError(t, err)
	require.Zero(t, n, "no stream yet")

	pub := newPublisher(t, cfg)
	_, err = pub.Publish(ctx, events(t, 1, 4))
	require.NoError(t, err)
	var r record
	runConsumer(t, cfg, func(ctx context.Context, d notify.Delivery) {
		if d.Message().ID == 4 {
			assert.NoError(t, d.Ack(ctx))
		} else {
			assert.NoError(t, d.DeadLetter(ctx, "550 no such mailbox"))
		}
		r.add(d.Message())
	})
	require.Eventually(t, func() bool {
		n, err := natstr.DeadLetterCount(ctx, cfg)
		return err == nil && n == 3
	}, wait, tick, "dead letters")

	removed, err := natstr.RemoveDeadLetters(ctx, cfg, []int64{1, 3, 99})
	require.NoError(t, err)
	require.Equal(t, 2, removed)
	n, err = natstr.DeadLetterCount(ctx, cfg)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	left := peek(t, cfg)
	require.Len(t, left, 1)
	require.Equal(t, int64(2), left[0].ID)
	require.Equal(t, "550 no such mailbox", left[0].Reason)
}

// Retries follow the schedule: retry n waits the n-th delay, the last one
// repeating.
func TestRetrySchedule(t *testing.T) {
	srv := testenv.StartNATS(t, testenv.NATSOptions{})
	cfg := config(t, srv)
	cfg.RetryDelays = []time.Duration{100 * time.Millisecond, 700 * time.Millisecond}
	pub := newPublisher(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := pub.Publish(ctx, events(t, 1, 1))
	require.NoError(t, err)

	var r record
	runConsumer(t, cfg, func(ctx context.Context, d notify.Delivery) {
		r.add(d.Message())
		if d.Message().RetryCount < 3 {
			assert.NoError(t, d.Retry(ctx, fmt.Sprintf("try %d", d.Message().RetryCount)))
			return
		}
		assert.NoError(t, d.Ack(ctx))
	})
	require.Eventually(t, func() bool { return r.total() == 4 }, wait, tick)
	r.mu.Lock()
	defer r.mu.Unlock()
	want := []time.Duration{100 * time.Millisecond, 700 * time.Millisecond, 700 * time.Millisecond}
	for i, d := range want {
		require.Equal(t, i+1, r.msgs[i+1].RetryCount)
		gap := r.at[i+1].Sub(r.at[i])
		require.GreaterOrEqual(t, gap, d*9/10, "retry %d came back too early", i+1)
		require.Less(t, gap, d+3*time.Second, "retry %d came back too late", i+1)
	}
}

// eventually is require.Eventually whose failure shows the consumer's log
// as it is when the wait ends (testify formats a message when it is
// called, before the wait).
func eventually(t *testing.T, cond func() bool, logs *testlog.Buffer, what string) {
	t.Helper()
	if !assert.Eventually(t, cond, wait, tick) {
		t.Fatalf("%s; the consumer logged:\n%s", what, logs.String())
	}
}
