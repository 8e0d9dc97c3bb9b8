// Package pipelinetest is the end-to-end suite every transport runs: the
// same subtests drive a real worker.Worker, a real store and a real SMTP
// server over each transport, so that delivery, retries, dead letters,
// deduplication and crash recovery behave the same whichever one a
// deployment picks. The transport's seam alone is tested by transporttest;
// this suite checks that the parts work together.
//
// A transport's test calls Run with a function that returns a Harness on a
// fresh database (and, for a broker, a topology of its own):
//
//	func TestPipeline(t *testing.T) {
//		pipelinetest.Run(t, func(t *testing.T) pipelinetest.Harness {
//			s := openMigrated(t) // closed by t.Cleanup
//			return pipelinetest.Harness{Store: s, NewSource: ..., Pump: ..., Redeliver: ...}
//		})
//	}
package pipelinetest

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/mail"
	smtpsender "github.com/heraldhq/herald/internal/sender/smtp"
	"github.com/heraldhq/herald/internal/testkit/smtptest"
	"github.com/heraldhq/herald/internal/testkit/transporttest"
	"github.com/heraldhq/herald/internal/worker"
)

// RetryDelay is the retry delay of every source the suite asks for: the
// seam's suite's, so that a transport keeps one topology for both. It is
// exported for transports that keep the delay with their topology (RabbitMQ:
// the retry queue's message TTL) and so need it before the first source
// exists, for the publisher behind Pump.
const RetryDelay = transporttest.RetryDelay

// Store is what the suite needs from a store: creates, reads to check the
// outcome, and the worker's bookkeeping. Both store engines satisfy it.
type Store interface {
	Create(ctx context.Context, n notify.NewNotification) (notify.Created, error)
	Get(ctx context.Context, id int64) (notify.Notification, error)
	worker.Bookkeeper
}

// SourceConfig tunes one source the suite asks for. It is the seam's
// suite's, so that one function can make the sources of both.
type SourceConfig = transporttest.SourceConfig

// Harness is one transport under test, over a store of its own.
type Harness struct {
	// Store is migrated, on a database that no other test uses, and is
	// closed (and the database removed) by t.Cleanup.
	Store Store
	// NewSource returns a fresh consumer, as a new worker process would
	// have one, stopped by t.Cleanup if the suite has not stopped it.
	// Required.
	NewSource func(t *testing.T, cfg SourceConfig) worker.Source
	// Pump makes committed outbox events deliverable until ctx ends: a
	// broker transport starts a relay in the background; the table
	// transport, whose workers claim outbox rows themselves, does nothing.
	// It returns at once, and waits in t.Cleanup for whatever it started.
	// Required.
	Pump func(t *testing.T, ctx context.Context)
	// Redeliver makes the message of a notification that was already
	// applied deliverable a second time, with the same message id: a
	// broker transport publishes its outbox event again; the table
	// transport marks the outbox row unprocessed again. Required.
	Redeliver func(t *testing.T, notificationID int64)
}

// Settings of the worker the suite drives.
const (
	// from gives every Message-ID the domain herald.test.
	from = "herald@herald.test"
	// maxRetries is the worker's MaxRetries: a delivery is attempted at
	// most 1+maxRetries times.
	maxRetries = 2
	// prefetch is the prefetch of the sources the worker consumes.
	prefetch = 4
	// lease is the lease of sources that are stopped gracefully: long
	// enough never to expire during a test.
	lease = 30 * time.Second
	// crashLease is the lease of the source that stops without settling:
	// short, so that its deliveries come back soon.
	crashLease = time.Second
)

// wait is how long the suite polls for something asynchronous; tick is how
// often.
const (
	wait = 15 * time.Second
	tick = 20 * time.Millisecond
)

// Run runs the suite. newHarness is called once per subtest, so subtests run
// in parallel on separate databases and topologies.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Helper()
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, e *env)
	}{
		{"Delivery", testDelivery},
		{"RetryCount", testRetryCount},
		{"DeadLetterAfterRetries", testDeadLetterAfterRetries},
		{"PermanentFailure", testPermanentFailure},
		{"DuplicateAbsorbed", testDuplicateAbsorbed},
		{"RedeliveryAfterCrash", testRedeliveryAfterCrash},
		{"NothingLostAcrossRestart", testNothingLostAcrossRestart},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			require.NotNil(t, h.Store, "Harness.Store")
			require.NotNil(t, h.NewSource, "Harness.NewSource")
			require.NotNil(t, h.Pump, "Harness.Pump")
			require.NotNil(t, h.Redeliver, "Harness.Redeliver")
			// Registered after the harness, so it ends before the harness
			// tears its store down.
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			t.Cleanup(cancel)
			tc.fn(t, &env{h: h, ctx: ctx, smtp: smtptest.Start(t)})
		})
	}
}

// env is what one subtest works with: its harness, a context ending with the
// test, and an SMTP server of its own.
type env struct {
	h    Harness
	ctx  context.Context
	smtp *smtptest.Server
}

// sourceConfig is the configuration of a source that stops gracefully.
func sourceConfig() SourceConfig {
	return SourceConfig{RetryDelay: RetryDelay, Prefetch: prefetch, Lease: lease}
}

// sender returns a real SMTP sender pointed at the test's server.
func (e *env) sender(t *testing.T) mail.EmailSender {
	t.Helper()
	s, err := smtpsender.New(smtpsender.Config{URL: e.smtp.URL(), Timeout: 5 * time.Second})
	require.NoError(t, err)
	return s
}

// background runs fn on a context of its own until cancel, stop or the end
// of the test ends it; stop also waits for fn to return, and requires nil.
func (e *env) background(t *testing.T, what string, fn func(ctx context.Context) error) (cancel, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				assert.NoError(t, err, "%s returned an error", what)
			case <-time.After(wait):
				t.Errorf("%s did not return within %s after its context ended", what, wait)
			}
		})
	}
	t.Cleanup(stop)
	return cancel, stop
}

// runningWorker is a worker.Worker running in the background.
type runningWorker struct {
	reg *prometheus.Registry
	// cancel ends the worker's context; stop also waits for Run to return.
	cancel, stop func()
}

// startWorker runs a real worker on a fresh source, with its own metrics
// registry, until stop or the end of the test.
func (e *env) startWorker(t *testing.T, sender mail.EmailSender) *runningWorker {
	t.Helper()
	reg := prometheus.NewRegistry()
	email, err := mail.NewSender(from, sender)
	require.NoError(t, err)
	channels := map[string]worker.Channel{notify.ChannelEmail: {Sender: email, Provider: "mail server"}}
	w, err := worker.New(e.h.NewSource(t, sourceConfig()), e.h.Store, channels, worker.Config{
		MaxRetries:   maxRetries,
		StoreBackoff: 100 * time.Millisecond,
		Registerer:   reg,
		Logger:       slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	require.NoError(t, err)
	cancel, stop := e.background(t, "worker", w.Run)
	return &runningWorker{reg: reg, cancel: cancel, stop: stop}
}

// outcomes returns the worker's herald_worker_deliveries_total by outcome.
func (w *runningWorker) outcomes(t require.TestingT) map[notify.Outcome]float64 {
	mfs, err := w.reg.Gather()
	require.NoError(t, err)
	out := map[notify.Outcome]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "herald_worker_deliveries_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					out[notify.Outcome(l.GetValue())] += m.GetCounter().GetValue() // summed over channels
				}
			}
		}
	}
	return out
}

// counts builds the expected outcomes map.
func counts(sent, retried, dead, duplicate float64) map[notify.Outcome]float64 {
	return map[notify.Outcome]float64{
		notify.OutcomeSent:      sent,
		notify.OutcomeRetried:   retried,
		notify.OutcomeDead:      dead,
		notify.OutcomeDuplicate: duplicate,
	}
}

// waitOutcomes waits until the worker's deliveries are exactly want.
func (w *runningWorker) waitOutcomes(t *testing.T, want map[notify.Outcome]float64) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.Equal(c, want, w.outcomes(c))
	}, wait, tick, "herald_worker_deliveries_total")
}

// request returns a valid create request; i makes it distinct.
func request(i int) notify.CreateRequest {
	return notify.CreateRequest{
		UserID:  fmt.Sprintf("user-%d", i),
		Channel: notify.ChannelEmail,
		To:      fmt.Sprintf("someone-%d@example.com", i),
		Subject: fmt.Sprintf("Hello %d", i),
		Body:    "Body line one\nline two",
	}
}

func (e *env) create(t *testing.T, i int) notify.Notification {
	t.Helper()
	c, err := e.h.Store.Create(e.ctx, notify.NewNotification{Request: request(i)})
	require.NoError(t, err)
	return c.Notification
}

func (e *env) createN(t *testing.T, n int) []notify.Notification {
	t.Helper()
	out := make([]notify.Notification, n)
	for i := range out {
		out[i] = e.create(t, i)
	}
	return out
}

// messageID is the Message-ID every email for n carries.
func messageID(n notify.Notification) string {
	return notify.MessageID(notify.FormatID(n.ID), from)
}

// oneEach is the CountByMessageID of exactly one email per notification.
func oneEach(ns []notify.Notification) map[string]int {
	out := make(map[string]int, len(ns))
	for _, n := range ns {
		out[messageID(n)] = 1
	}
	return out
}

// waitStatus waits until every one of ns has status want and returns them as
// stored then. Its deadline grows with len(ns): each pass reads every one,
// and a thousand reads on a loaded machine take seconds of the deadline.
func (e *env) waitStatus(t *testing.T, want notify.Status, ns ...notify.Notification) []notify.Notification {
	t.Helper()
	got := make([]notify.Notification, len(ns))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for i, n := range ns {
			g, err := e.h.Store.Get(e.ctx, n.ID)
			require.NoError(c, err)
			require.Equal(c, want, g.Status, "status of notification %d", n.ID)
			got[i] = g
		}
	}, wait+time.Duration(len(ns))*20*time.Millisecond, tick)
	return got
}

// waitEmails waits until the SMTP server accepted exactly want, by
// Message-ID.
func (e *env) waitEmails(t *testing.T, want map[string]int) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.Equal(c, want, e.smtp.CountByMessageID())
	}, wait, tick, "emails by Message-ID")
}

// Every notification is sent once: one email per Message-ID, each with the
// notification's recipient and subject.
func testDelivery(t *testing.T, e *env) {
	e.h.Pump(t, e.ctx)
	w := e.startWorker(t, e.sender(t))
	ns := e.createN(t, 20)

	got := e.waitStatus(t, notify.StatusSent, ns...)
	for _, n := range got {
		require.Equal(t, 1, n.Attempts, "attempts of notification %d", n.ID)
		require.NotNil(t, n.SentAt, "sent_at of notification %d", n.ID)
	}
	w.waitOutcomes(t, counts(20, 0, 0, 0))
	require.Equal(t, oneEach(ns), e.smtp.CountByMessageID())
	byID := map[string]smtptest.Message{}
	for _, m := range e.smtp.Messages() {
		byID[m.MessageID] = m
	}
	for _, n := range ns {
		m := byID[messageID(n)]
		require.Equal(t, []string{n.To}, m.To, "recipient of notification %d", n.ID)
		require.Equal(t, n.Subject, m.Subject, "subject of notification %d", n.ID)
	}
}

// failFirst is a sender whose SMTP server refuses transactions until it has
// seen n of them: it restores the server as soon as the nth attempt
// returned, before the worker schedules the next one, so the number of
// refused transactions is exact.
type failFirst struct {
	next mail.EmailSender
	srv  *smtptest.Server
	n    int
}

func (f *failFirst) Send(ctx context.Context, e mail.Email) error {
	err := f.next.Send(ctx, e)
	if f.srv.Attempts() >= f.n {
		f.srv.Fail(0, "")
	}
	return err
}

// A transient failure is retried after the retry delay, each attempt counted:
// two refusals and a success make three attempts and three transactions.
func testRetryCount(t *testing.T, e *env) {
	e.h.Pump(t, e.ctx)
	e.smtp.Fail(451, "try again later")
	w := e.startWorker(t, &failFirst{next: e.sender(t), srv: e.smtp, n: 2})
	n := e.create(t, 1)

	got := e.waitStatus(t, notify.StatusSent, n)[0]
	require.Equal(t, 3, got.Attempts)
	w.waitOutcomes(t, counts(1, 2, 0, 0))
	require.Equal(t, 3, e.smtp.Attempts(), "SMTP transactions")
	require.Equal(t, oneEach([]notify.Notification{n}), e.smtp.CountByMessageID())
}

// A delivery that keeps failing is dead-lettered after 1+MaxRetries attempts
// with its last error, and is never delivered again while other work flows.
func testDeadLetterAfterRetries(t *testing.T, e *env) {
	e.h.Pump(t, e.ctx)
	e.smtp.Fail(451, "mailbox busy")
	w := e.startWorker(t, e.sender(t))
	dead := e.create(t, 1)

	got := e.waitStatus(t, notify.StatusFailed, dead)[0]
	require.Equal(t, 1+maxRetries, got.Attempts)
	require.Contains(t, got.LastError, "mailbox busy")
	require.Nil(t, got.SentAt)
	w.waitOutcomes(t, counts(0, maxRetries, 1, 0))
	require.Equal(t, 1+maxRetries, e.smtp.Attempts(), "SMTP transactions")

	// The server recovers; new work goes through, the dead letter stays
	// dead: no further delivery of it reaches the worker, not even one the
	// store would absorb as a duplicate.
	e.smtp.Fail(0, "")
	other := e.create(t, 2)
	e.waitStatus(t, notify.StatusSent, other)
	want := counts(1, maxRetries, 1, 0)
	w.waitOutcomes(t, want)
	require.Never(t, func() bool {
		return !assert.ObjectsAreEqual(want, w.outcomes(t)) || e.smtp.Attempts() != 2+maxRetries
	}, 3*RetryDelay, tick, "the dead letter was delivered again")
	require.Equal(t, oneEach([]notify.Notification{other}), e.smtp.CountByMessageID())
	again, err := e.h.Store.Get(e.ctx, dead.ID)
	require.NoError(t, err)
	require.Equal(t, got, again, "the dead letter changed")
}

// A permanent refusal (5xx) dead-letters at once, after one attempt.
func testPermanentFailure(t *testing.T, e *env) {
	e.h.Pump(t, e.ctx)
	e.smtp.Fail(550, "no such mailbox")
	w := e.startWorker(t, e.sender(t))
	n := e.create(t, 1)

	got := e.waitStatus(t, notify.StatusFailed, n)[0]
	require.Equal(t, 1, got.Attempts)
	require.Contains(t, got.LastError, "no such mailbox")
	w.waitOutcomes(t, counts(0, 0, 1, 0))
	require.Equal(t, 1, e.smtp.Attempts(), "SMTP transactions")
	require.Zero(t, e.smtp.Count())
}

// A second delivery of an applied message is acknowledged as a duplicate and
// sends nothing.
func testDuplicateAbsorbed(t *testing.T, e *env) {
	e.h.Pump(t, e.ctx)
	w := e.startWorker(t, e.sender(t))
	n := e.create(t, 1)
	sent := e.waitStatus(t, notify.StatusSent, n)[0]
	w.waitOutcomes(t, counts(1, 0, 0, 0))

	e.h.Redeliver(t, n.ID)
	w.waitOutcomes(t, counts(1, 0, 0, 1))
	require.Equal(t, oneEach([]notify.Notification{n}), e.smtp.CountByMessageID())
	require.Equal(t, 1, e.smtp.Attempts(), "SMTP transactions")
	got, err := e.h.Store.Get(e.ctx, n.ID)
	require.NoError(t, err)
	require.Equal(t, sent, got, "the duplicate changed the notification")
}

// Deliveries a consumer took and never settled (its process was killed)
// reach the next worker, every one of them.
func testRedeliveryAfterCrash(t *testing.T, e *env) {
	e.h.Pump(t, e.ctx)
	ns := e.createN(t, 5)

	var mu sync.Mutex
	taken := map[int64]bool{}
	crashed := e.h.NewSource(t, SourceConfig{RetryDelay: RetryDelay, Prefetch: 10, Lease: crashLease})
	_, stop := e.background(t, "crashing consumer", func(ctx context.Context) error {
		return crashed.Consume(ctx, func(_ context.Context, d notify.Delivery) {
			// Take the delivery and return without settling it, as a
			// process killed mid-delivery would.
			mu.Lock()
			taken[d.Message().ID] = true
			mu.Unlock()
		})
	})
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(taken) == len(ns)
	}, wait, tick, "the first consumer did not take every delivery")
	stop()
	for _, n := range e.waitStatus(t, notify.StatusPending, ns...) {
		require.Zero(t, n.Attempts)
	}
	require.Zero(t, e.smtp.Attempts())

	w := e.startWorker(t, e.sender(t))
	e.waitStatus(t, notify.StatusSent, ns...)
	w.waitOutcomes(t, counts(float64(len(ns)), 0, 0, 0))
	require.Equal(t, oneEach(ns), e.smtp.CountByMessageID())
}

// gated is a sender that lets the first free sends through at once and
// holds the others until open is closed, so that a worker can be stopped
// with deliveries in flight.
type gated struct {
	next    mail.EmailSender
	free    int64
	started atomic.Int64
	open    chan struct{}
}

func (g *gated) Send(ctx context.Context, e mail.Email) error {
	if g.started.Add(1) > g.free {
		select {
		case <-g.open:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.next.Send(ctx, e)
}

// A worker stopped mid-stream finishes what it holds and hands back the
// rest; the next worker sends the rest. Nothing is lost, and a graceful stop
// sends nothing twice.
func testNothingLostAcrossRestart(t *testing.T, e *env) {
	const total, free = 50, 10
	e.h.Pump(t, e.ctx)
	g := &gated{next: e.sender(t), free: free, open: make(chan struct{})}
	first := e.startWorker(t, g)

	// Create while the worker runs; the creates may wait for a store the
	// held sends keep busy (SQLite has one writer), so they run on their
	// own goroutine.
	ns := make([]notify.Notification, total)
	created := make(chan error, 1)
	go func() {
		for i := range ns {
			c, err := e.h.Store.Create(e.ctx, notify.NewNotification{Request: request(i)})
			if err != nil {
				created <- fmt.Errorf("create %d: %w", i, err)
				return
			}
			ns[i] = c.Notification
		}
		created <- nil
	}()
	require.Eventually(t, func() bool { return g.started.Load() > free }, wait, tick,
		"the first worker never had a delivery in flight")

	// Stop with sends in flight; they finish once released.
	first.cancel()
	close(g.open)
	first.stop()
	select {
	case err := <-created:
		require.NoError(t, err)
	case <-time.After(wait):
		t.Fatal("creates did not finish")
	}
	before := first.outcomes(t)
	require.Less(t, before[notify.OutcomeSent], float64(total), "the first worker was not stopped mid-stream")
	require.Zero(t, before[notify.OutcomeDuplicate])

	second := e.startWorker(t, e.sender(t))
	e.waitStatus(t, notify.StatusSent, ns...)
	e.waitEmails(t, oneEach(ns))
	second.waitOutcomes(t, counts(total-before[notify.OutcomeSent], 0, 0, 0))
	require.Equal(t, before, first.outcomes(t), "the stopped worker went on delivering")
}
