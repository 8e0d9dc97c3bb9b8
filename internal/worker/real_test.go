package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/mail"
	"github.com/heraldhq/herald/internal/sender/smtp"
	"github.com/heraldhq/herald/internal/store/postgres"
	"github.com/heraldhq/herald/internal/store/sqlite"
	"github.com/heraldhq/herald/internal/testkit/pgtest"
	"github.com/heraldhq/herald/internal/testkit/smtptest"
	"github.com/heraldhq/herald/internal/testkit/testlog"
	"github.com/heraldhq/herald/internal/worker"
)

// The tests in this file run the worker against a real store and a real
// SMTP server (smtptest, through the real SMTP sender). Only the transport
// is a stand-in (sliceSource): it is not what is under test.

// realStore is what these tests need of a store: the worker's seam, and
// the means to create notifications, take their outbox messages and read
// the outcome.
type realStore interface {
	worker.Bookkeeper
	Create(ctx context.Context, nn notify.NewNotification) (notify.Created, error)
	Get(ctx context.Context, id int64) (notify.Notification, error)
	Attempts(ctx context.Context, id int64) ([]notify.Attempt, error)
	Claim(ctx context.Context, token string, limit int, lease time.Duration) ([]notify.Message, error)
}

func openSQLite(t *testing.T) realStore {
	t.Helper()
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "herald.db"), sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.NoError(t, s.Migrate(t.Context()))
	return s
}

func openPostgres(t *testing.T) realStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, pgtest.URL(t), postgres.Config{MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	require.NoError(t, s.Migrate(ctx))
	return s
}

// sliceSource hands its messages to the worker from prefetch goroutines,
// as a transport does: a retried message comes back with RetryCount+1, a
// released one as it was, both at once (no retry delay).
type sliceSource struct {
	prefetch int
	queue    chan notify.Message

	mu      sync.Mutex
	settled map[int64][]string // message id -> settlements, in order
}

func newSliceSource(prefetch int, msgs []notify.Message) *sliceSource {
	s := &sliceSource{prefetch: prefetch, queue: make(chan notify.Message, 10000), settled: map[int64][]string{}}
	for _, m := range msgs {
		s.queue <- m
	}
	return s
}

func (s *sliceSource) Consume(ctx context.Context, handle notify.Handler) error {
	var wg sync.WaitGroup
	for range s.prefetch {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case m := <-s.queue:
					handle(ctx, &sliceDelivery{src: s, msg: m})
				}
			}
		})
	}
	wg.Wait()
	return nil
}

func (s *sliceSource) settle(id int64, how string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settled[id] = append(s.settled[id], how)
}

func (s *sliceSource) settlements(id int64) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.settled[id]...)
}

type sliceDelivery struct {
	src *sliceSource
	msg notify.Message
}

func (d *sliceDelivery) Message() notify.Message { return d.msg }
func (d *sliceDelivery) Ack(context.Context) error {
	d.src.settle(d.msg.ID, "ack")
	return nil
}
func (d *sliceDelivery) Retry(context.Context, string) error {
	d.src.settle(d.msg.ID, "retry")
	m := d.msg
	m.RetryCount++
	d.src.queue <- m
	return nil
}
func (d *sliceDelivery) DeadLetter(context.Context, string) error {
	d.src.settle(d.msg.ID, "dead")
	return nil
}
func (d *sliceDelivery) Release(_ context.Context, _ time.Duration) error {
	d.src.settle(d.msg.ID, "release")
	d.src.queue <- d.msg
	return nil
}

// create stores one notification per recipient and returns their ids and
// outbox messages.
func create(t *testing.T, s realStore, to ...string) ([]int64, []notify.Message) {
	t.Helper()
	ctx := t.Context()
	var ids []int64
	for i, rcpt := range to {
		c, err := s.Create(ctx, notify.NewNotification{Request: notify.CreateRequest{
			UserID: fmt.Sprintf("u%d", i), Channel: notify.ChannelEmail, To: rcpt,
			Subject: fmt.Sprintf("Hello %d", i), Body: "Body",
		}})
		require.NoError(t, err)
		ids = append(ids, c.Notification.ID)
	}
	msgs, err := s.Claim(ctx, "worker-test", len(to), time.Hour)
	require.NoError(t, err)
	require.Len(t, msgs, len(to))
	return ids, msgs
}

func recipients(n int, format string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(format, i)
	}
	return out
}

// runWorker runs w on src until the test ends.
func runWorker(t *testing.T, w *worker.Worker) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Error("worker did not stop")
		}
	})
}

// waitStatus polls until every notification has status, or fails.
func waitStatus(t *testing.T, s realStore, ids []int64, status notify.Status, within time.Duration) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, id := range ids {
			n, err := s.Get(context.Background(), id)
			if !assert.NoError(c, err) {
				return
			}
			assert.Equalf(c, status, n.Status, "notification %d", id)
		}
	}, within, 20*time.Millisecond)
}

func newSMTP(t *testing.T, srv *smtptest.Server, sessions int, timeout time.Duration) *smtp.Sender {
	t.Helper()
	snd, err := smtp.New(smtp.Config{URL: srv.URL(), MaxSessions: sessions, MaxIdle: sessions, Timeout: timeout})
	require.NoError(t, err)
	t.Cleanup(func() { _ = snd.Close() })
	return snd
}

// emailChannels is the email channel on the email sender next, From
// herald@example.com, with ch's limits.
func emailChannels(t *testing.T, next mail.EmailSender, ch worker.Channel) map[string]worker.Channel {
	t.Helper()
	snd, err := mail.NewSender("herald@example.com", next)
	require.NoError(t, err)
	ch.Sender = snd
	ch.Provider = "mail server"
	return map[string]worker.Channel{notify.ChannelEmail: ch}
}

// timedSender notes when each send starts.
type timedSender struct {
	mail.EmailSender
	mu     sync.Mutex
	starts []time.Time
}

func (s *timedSender) Send(ctx context.Context, e mail.Email) error {
	s.mu.Lock()
	s.starts = append(s.starts, time.Now())
	s.mu.Unlock()
	return s.EmailSender.Send(ctx, e)
}

// Issue 16, defect 1: the worker owns the rate limit, and waiting for a
// turn is neither part of the send's timeout nor an attempt. 20 mails at 2/s
// with a 3s send timeout and 8 in flight all go (the last waits 9s for its
// turn), each at its first attempt, and no window of the sends holds more
// than the rate allows. The timeout is no tighter: on two loaded cores a
// 1s SMTP session has run out and dead-lettered a mail (MaxRetries 0).
func TestRateLimitIsNoAttempt(t *testing.T) {
	t.Parallel()
	const (
		n     = 20
		rate  = 2.0
		burst = 2 // max(1, int(rate))
	)
	st := openSQLite(t)
	srv := smtptest.Start(t)
	snd := &timedSender{EmailSender: newSMTP(t, srv, 8, 3*time.Second)}
	ids, msgs := create(t, st, recipients(n, "r%d@example.com")...)
	reg := prometheus.NewRegistry()
	w, err := worker.New(newSliceSource(8, msgs), st, emailChannels(t, snd, worker.Channel{Rate: rate, SendTimeout: 3 * time.Second, Concurrency: 8}), worker.Config{
		MaxRetries:   2,
		StoreBackoff: 10 * time.Millisecond, Registerer: reg,
	})
	require.NoError(t, err)
	runWorker(t, w)

	waitStatus(t, st, ids, notify.StatusSent, 30*time.Second)
	require.Equal(t, n, srv.Count())
	for _, id := range ids {
		as, err := st.Attempts(t.Context(), id)
		require.NoError(t, err)
		require.Len(t, as, 1, "notification %d", id)
		require.Equal(t, notify.AttemptSent, as[0].Outcome)
	}
	require.Equal(t, map[notify.Outcome]float64{notify.OutcomeSent: n, notify.OutcomeRetried: 0, notify.OutcomeDead: 0, notify.OutcomeDuplicate: 0},
		outcomes(t, reg))

	// A token bucket of rate r and burst b lets at most b + r*T sends start
	// in any window of length T.
	snd.mu.Lock()
	starts := append([]time.Time(nil), snd.starts...)
	snd.mu.Unlock()
	require.Len(t, starts, n)
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	// The turns are taken before the claims, and a claim's transaction
	// (a group commit) takes a varying time: the sends start up to that
	// much apart from their turns.
	const tolerance = 150 * time.Millisecond
	for i := range starts {
		for j := range i {
			least := time.Duration(float64(i-j+1-burst) / rate * float64(time.Second))
			require.GreaterOrEqual(t, starts[i].Sub(starts[j])+tolerance, least, "sends %d..%d", j, i)
		}
	}
	require.GreaterOrEqual(t, starts[n-1].Sub(starts[0])+tolerance, time.Duration((n-burst)/rate*float64(time.Second)))
}

func outcomes(t *testing.T, reg *prometheus.Registry) map[notify.Outcome]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[notify.Outcome]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "herald_worker_deliveries_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["channel"] == notify.ChannelEmail {
				out[notify.Outcome(labels["outcome"])] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// throttling classifies a 421 reply as throttling, as the SMTP sender of
// issue 16 does, whatever the sender in this tree says.
type throttling struct{ *smtp.Sender }

func (s throttling) Send(ctx context.Context, e mail.Email) error {
	err := s.Sender.Send(ctx, e)
	var serr *gosmtp.SMTPError
	if errors.As(err, &serr) && serr.Code == 421 {
		return notify.Throttled(errors.New(err.Error()), 0)
	}
	return err
}

// Issue 16, defect 2: a server that answers 421 to MAIL (and NOOP fine)
// is not hammered: whether the sender calls that an outage (probe, then
// one trial) or throttling (one trial), the gate lets one send through per
// backoff and opens only when one is accepted. The old gate reopened on
// every passing probe (157 MAIL commands for 5 messages in 20s).
func TestGateDoesNotHammerAThrottlingServer(t *testing.T) {
	t.Parallel()
	for name, wrap := range map[string]func(*smtp.Sender) mail.EmailSender{
		"as the sender classifies 421": func(s *smtp.Sender) mail.EmailSender { return s },
		"421 as throttling":            func(s *smtp.Sender) mail.EmailSender { return throttling{s} },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const (
				n        = 5
				throttle = 10 * time.Second
			)
			st := openSQLite(t)
			srv := smtptest.Start(t)
			srv.FailAt(smtptest.StepMail, 421, "4.7.0 Too many messages, slow down")
			began := time.Now()
			logs := &testlog.Buffer{}
			ids, msgs := create(t, st, recipients(n, "r%d@example.com")...)
			w, err := worker.New(newSliceSource(n, msgs), st, emailChannels(t, wrap(newSMTP(t, srv, n, 5*time.Second)), worker.Channel{SendTimeout: 5 * time.Second}), worker.Config{
				MaxRetries: 2, StoreBackoff: 10 * time.Millisecond,
				SenderBackoff: time.Second, SenderBackoffMax: 8 * time.Second,
				Logger: slog.New(slog.NewTextHandler(logs, nil)), Registerer: prometheus.NewRegistry(),
			})
			require.NoError(t, err)
			runWorker(t, w)

			require.Eventually(t, func() bool { up, _ := w.SenderStatus(); return !up }, 10*time.Second, 10*time.Millisecond)
			_, reason := w.SenderStatus()
			require.Contains(t, reason, "421")

			// The throttle lasts its time; then the server takes mail.
			<-time.After(time.Until(began.Add(throttle)))
			mails := srv.MailCommands()
			srv.FailAt(smtptest.StepMail, 0, "")

			// The bound: each send may cost 2 MAIL commands (the sender
			// retries a MAIL on a fresh session when a reused one answers
			// 421). The n first sends go while the gate is open; it closes
			// on the first failure (1 failure) and then lets one trial
			// through per backoff: full jitter on the upper half of 1s, 2s,
			// 4s, 8s, 8s waits at least 0.5s, 1s, 2s, 4s, 4s, so the trials
			// start at 0.5s, 1.5s, 3.5s, 7.5s, 11.5s at the earliest: at
			// most 4 within the 10s.
			const bound = 2*n + 2*4
			t.Logf("%d MAIL commands during the throttle (bound %d)", mails, bound)
			require.LessOrEqual(t, mails, bound, "MAIL commands during the throttle")
			require.Positive(t, mails)

			waitStatus(t, st, ids, notify.StatusSent, 30*time.Second)
			require.Equal(t, n, srv.Count())
			for _, id := range ids {
				nn, err := st.Get(t.Context(), id)
				require.NoError(t, err)
				require.Equal(t, 1, nn.Attempts, "the throttled tries spent no attempt")
			}
			up, _ := w.SenderStatus()
			require.True(t, up)
			out := logs.String()
			require.Equal(t, 1, strings.Count(out, "sends paused"), out)
			require.Equal(t, 1, strings.Count(out, "sends resumed"), out)
		})
	}
}

// transactionFailure classifies a connection lost after the data as the
// SMTP sender of issue 16 does (a failure of this message's attempt),
// whatever the sender in this tree says.
type transactionFailure struct{ *smtp.Sender }

func (s transactionFailure) Send(ctx context.Context, e mail.Email) error {
	err := s.Sender.Send(ctx, e)
	if notify.IsSenderDown(err) && (strings.Contains(err.Error(), "end data:") || strings.Contains(err.Error(), "write data:")) {
		return errors.New(err.Error())
	}
	return err
}

// A message the server drops the connection on, after its data, spends
// its attempts and is dead-lettered, while the other mail keeps flowing:
// the gate never closes.
func TestDropAfterDataSpendsAttemptsOnly(t *testing.T) {
	t.Parallel()
	const good = 10
	st := openSQLite(t)
	srv := smtptest.Start(t)
	srv.DropAfterData(func(rcpt string) bool { return rcpt == "crash@example.com" })
	logs := &testlog.Buffer{}
	ids, msgs := create(t, st, append([]string{"crash@example.com"}, recipients(good, "r%d@example.com")...)...)
	src := newSliceSource(4, msgs)
	w, err := worker.New(src, st, emailChannels(t, transactionFailure{newSMTP(t, srv, 4, 5*time.Second)}, worker.Channel{}), worker.Config{
		MaxRetries: 2, StoreBackoff: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), Registerer: prometheus.NewRegistry(),
	})
	require.NoError(t, err)
	runWorker(t, w)

	waitStatus(t, st, ids[1:], notify.StatusSent, 30*time.Second)
	waitStatus(t, st, ids[:1], notify.StatusFailed, 30*time.Second)
	require.Equal(t, good, srv.Count())
	require.Equal(t, 3, srv.Drops())
	as, err := st.Attempts(t.Context(), ids[0])
	require.NoError(t, err)
	var got []string
	for _, a := range as {
		got = append(got, a.Outcome)
	}
	require.Equal(t, []string{notify.AttemptRetry, notify.AttemptRetry, notify.AttemptDead}, got)
	require.Equal(t, []string{"retry", "retry", "dead"}, src.settlements(msgs[0].ID))
	up, _ := w.SenderStatus()
	require.True(t, up)
	require.NotContains(t, logs.String(), "sends paused", "the gate never closed")
}

// failFirstSentRecord fails the first record transaction that holds a
// sent result, as a database that drops the connection at the commit.
type failFirstSentRecord struct {
	worker.Bookkeeper
	failed atomic.Bool
}

func (s *failFirstSentRecord) ClaimAndRecord(ctx context.Context, reqs []notify.ClaimRequest, lease time.Duration, rs []notify.DeliveryResult) ([]notify.Claim, []bool, error) {
	for _, r := range rs {
		if r.Outcome == notify.AttemptSent && s.failed.CompareAndSwap(false, true) {
			return nil, nil, errors.New("record: connection reset by peer")
		}
	}
	return s.Bookkeeper.ClaimAndRecord(ctx, reqs, lease, rs)
}

// Issue 16, defect 4: a record that fails after an accepted send is
// retried until it commits; the mail is not sent again.
func TestFailedRecordDoesNotSendTwice(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(*testing.T) realStore{"sqlite": openSQLite, "postgres": openPostgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := open(t)
			srv := smtptest.Start(t)
			ids, msgs := create(t, st, "a@example.com")
			faulty := &failFirstSentRecord{Bookkeeper: st}
			src := newSliceSource(2, msgs)
			w, err := worker.New(src, faulty, emailChannels(t, newSMTP(t, srv, 2, 10*time.Second), worker.Channel{SendTimeout: 10 * time.Second}), worker.Config{
				StoreBackoff: 10 * time.Millisecond,
				Registerer:   prometheus.NewRegistry(),
			})
			require.NoError(t, err)
			runWorker(t, w)

			waitStatus(t, st, ids, notify.StatusSent, 60*time.Second)
			require.True(t, faulty.failed.Load(), "the fault was injected")
			require.Equal(t, 1, srv.Count(), "one mail at the server")
			require.Eventually(t, func() bool { return len(src.settlements(msgs[0].ID)) > 0 }, 10*time.Second, 10*time.Millisecond)
			require.Equal(t, []string{"ack"}, src.settlements(msgs[0].ID), "never handed back")
			as, err := st.Attempts(t.Context(), ids[0])
			require.NoError(t, err)
			require.Len(t, as, 1)
			require.Equal(t, notify.AttemptSent, as[0].Outcome)
		})
	}
}
