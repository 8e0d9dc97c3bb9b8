// Package worker applies deliveries: it sends each notification's email at
// most once per message id, retries transient failures and dead-letters the
// rest.
//
// Each delivery is claimed, sent and recorded: the claim (a lease on the
// message id and on the notification) commits before the send, the send
// runs with no transaction open, and the record commits its outcome after
// it. The claims and the records of concurrent deliveries go to the store
// in groups, one transaction each. Concurrency comes from the transport's
// prefetch, not from database connections.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/heraldhq/herald/internal/notify"
)

// Config tunes a Worker. A zero that means something is honoured (no
// retries); only values where zero is meaningless get a default.
type Config struct {
	// From is the email From address; the Message-ID domain is its domain.
	// Default "herald@localhost".
	From string
	// MaxRetries is the number of retries after the first attempt; a
	// delivery that fails after the last one is dead-lettered. Zero means
	// no retries: the first failure is dead-lettered. Default 0 (herald's
	// own default, HERALD_MAX_RETRIES, is 5).
	MaxRetries int
	// StoreBackoff is the pause before a delivery is handed back when the
	// store is unreachable, when another delivery of its notification holds
	// the claim, or when the transport failed to take a retry or a dead
	// letter. Zero would redeliver in a hot loop, so it means the default.
	// Default 5s.
	StoreBackoff time.Duration
	// SendTimeout bounds each send. It should be the sender's own timeout
	// (the SMTP sender's Timeout), so that the worker never gives up on a
	// send the sender still runs. A send is also cut short where the claim's
	// lease, as measured here, no longer leaves time to record it. Zero
	// means the default. Default 30s.
	SendTimeout time.Duration
	// Lease is how long a claim holds the message id and the notification:
	// after it another delivery of the notification may take the claim over
	// and send again (the holder is presumed to have died between its send
	// and its record). It must cover what a living holder does with it: the
	// claim's transaction, the send and the record's transaction, so it must
	// be longer than SendTimeout plus two store transactions (20s). Zero
	// means the default. Default DefaultLease(SendTimeout).
	Lease time.Duration
	// SenderBackoff is the first pause after the mail server went down or
	// throttled: when it has passed, one delivery probes (Prober) and then
	// tries one real send; each failed probe or try doubles it, up to
	// SenderBackoffMax, with jitter, and only a sent mail resets it. Zero
	// means the default. Default 1s.
	SenderBackoff time.Duration
	// SenderBackoffMax caps that pause, and is the longest a delivery waits
	// (for the server, or for its turn under Rate) before it is handed back
	// to come again. Zero means the default. Default 60s.
	SenderBackoffMax time.Duration
	// Rate is the most sends per second this worker makes (a provider's
	// limit, HERALD_SMTP_RATE), in bursts of up to one second's worth (at
	// least one). A delivery waits for its turn before its claim, so the
	// wait is neither part of the send's timeout nor an attempt; a turn
	// further away than SenderBackoffMax is not waited for: the delivery is
	// handed back. Zero means no limit; it must not be negative.
	Rate float64
	// Concurrency is the most deliveries the transport hands this worker at
	// once (HERALD_PREFETCH). With a Rate, it may be at most what the rate
	// lets through in SenderBackoffMax, or deliveries would queue for turns
	// they cannot wait for. Zero means unknown: not checked.
	Concurrency int
	// OutageSpendsAttempts makes a send that failed because the mail server
	// is down (notify.SenderDown) the message's attempt, retried and
	// dead-lettered like any failure, and it leaves the gate open.
	// Throttling never spends an attempt. Default false: an outage spends
	// none, and sends pause until the server is back.
	OutageSpendsAttempts bool
	// RetryDelays is the retry schedule the transport follows (the i-th
	// retry waits the i-th delay, the last repeating), so that the store
	// can record when a retry is due. Empty: due at once.
	RetryDelays []time.Duration
	// Logger receives one record per failed delivery, and one when the mail
	// server goes down and comes back. Default: discard.
	Logger *slog.Logger
	// Registerer, when set, receives the worker's metrics. Default: none.
	Registerer prometheus.Registerer
	// Crash, when set, is called at the named points of a delivery
	// ("after-send", "after-commit"); it exists for fault-injection runs
	// and is only wired when HERALD_DEBUG_FAULTS=1. Default: none.
	Crash func(point string)
}

// storeTimeout bounds one claim or record transaction (a group of them).
const storeTimeout = 10 * time.Second

// leaseMargin is what the default Lease adds to the holder's worst path
// (claim, send, record): the clock reads and the scheduling between them.
const leaseMargin = 5 * time.Second

// defaultSendTimeout is the SendTimeout of a Config that leaves it zero.
const defaultSendTimeout = 30 * time.Second

// The record of a send is retried until it commits: the send happened, and
// handing the delivery back would repeat it once the lease ran out.
const (
	recordBackoff    = 100 * time.Millisecond
	recordBackoffMax = 2 * time.Second
	// recordGrace is how long the record is still retried after the
	// worker's ctx ended.
	recordGrace = 2 * time.Second
)

// DefaultLease is the claim lease that covers a holder's worst path for a
// send timeout: the claim's transaction, the send, the record's
// transaction, and a margin. A sendTimeout of zero means the worker's
// default (30s). herald derives the table transport's row lease from it.
func DefaultLease(sendTimeout time.Duration) time.Duration {
	if sendTimeout == 0 {
		sendTimeout = defaultSendTimeout
	}
	return storeTimeout + sendTimeout + storeTimeout + leaseMargin
}

// maxGroup caps the deliveries one claim or record transaction serves.
const maxGroup = 256

func (c Config) withDefaults() Config {
	if c.From == "" {
		c.From = "herald@localhost"
	}
	if c.StoreBackoff == 0 {
		c.StoreBackoff = 5 * time.Second
	}
	if c.SendTimeout == 0 {
		c.SendTimeout = defaultSendTimeout
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease(c.SendTimeout)
	}
	if c.SenderBackoff == 0 {
		c.SenderBackoff = time.Second
	}
	if c.SenderBackoffMax == 0 {
		c.SenderBackoffMax = 60 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Crash == nil {
		c.Crash = func(string) {}
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.MaxRetries < 0:
		return fmt.Errorf("max retries must not be negative, got %d", c.MaxRetries)
	case c.StoreBackoff < 0:
		return fmt.Errorf("store backoff must not be negative, got %s", c.StoreBackoff)
	case c.SendTimeout < 0:
		return fmt.Errorf("send timeout must not be negative, got %s", c.SendTimeout)
	case c.Lease <= c.SendTimeout+2*storeTimeout:
		return fmt.Errorf("lease (%s) must be longer than the send timeout (%s) plus two store transactions (%s each): the claim's and the record's",
			c.Lease, c.SendTimeout, storeTimeout)
	case c.SenderBackoff < 0 || c.SenderBackoffMax < c.SenderBackoff:
		return fmt.Errorf("sender backoff must be positive and at most its maximum, got %s and %s", c.SenderBackoff, c.SenderBackoffMax)
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("rate must be a non-negative number of sends per second, got %g", c.Rate)
	case c.Concurrency < 0:
		return fmt.Errorf("concurrency must not be negative, got %d", c.Concurrency)
	}
	if err := c.checkRate(); err != nil {
		return err
	}
	if _, err := notify.ParseAddress(c.From); err != nil {
		return fmt.Errorf("from address %q: %w", c.From, err)
	}
	return nil
}

// checkRate refuses more deliveries in flight than the rate lets through
// in the time a delivery may wait: once the burst is spent, the last of
// them would wait longer than that for its turn, be handed back, and come
// back to wait again, for ever.
func (c Config) checkRate() error {
	if c.Rate == 0 || c.Concurrency == 0 {
		return nil
	}
	hold := c.SenderBackoffMax
	through := int(math.Floor(c.Rate * hold.Seconds()))
	if c.Concurrency <= through {
		return nil
	}
	if through == 0 {
		return fmt.Errorf("rate %g/s lets no send through in the %s a delivery may wait: raise the rate to at least %g/s",
			c.Rate, hold, 1/hold.Seconds())
	}
	return fmt.Errorf("rate %g/s lets %d sends through in the %s a delivery may wait; %d deliveries in flight would wait longer: lower the prefetch to at most %d or raise the rate",
		c.Rate, through, hold, c.Concurrency, through)
}

// Worker consumes deliveries from a Source and applies them.
type Worker struct {
	src     Source
	sender  Sender
	cfg     Config
	log     *slog.Logger
	metrics metrics
	books   *batcher[bookOp, bookResult]
	gate    *gate
	limiter *rate.Limiter // nil without a Rate

	// handedBack counts the deliveries that ended unsettled after shutdown
	// began (the transport redelivers them), for the "worker stopped" log.
	handedBack atomic.Int64
}

type metrics struct {
	deliveries *prometheus.CounterVec
	latency    prometheus.Histogram
	senderUp   prometheus.Gauge
}

// New returns a Worker. When sender also implements Prober, the worker
// probes with it while the mail server is down.
func New(src Source, store Store, sender Sender, cfg Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &Worker{src: src, sender: sender, cfg: cfg, log: cfg.Logger}
	w.metrics.deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_worker_deliveries_total",
		Help: "Deliveries handled by the worker, by outcome.",
	}, []string{"outcome"})
	w.metrics.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "herald_delivery_seconds",
		Help:    "Time from a notification's create to its email being sent.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800},
	})
	w.metrics.senderUp = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "herald_sender_up",
		Help: "1 while the mail server takes sends, 0 while the worker has paused them because it is down or throttling.",
	})
	for _, o := range []notify.Outcome{notify.OutcomeSent, notify.OutcomeRetried, notify.OutcomeDead, notify.OutcomeDuplicate} {
		w.metrics.deliveries.WithLabelValues(string(o))
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{w.metrics.deliveries, w.metrics.latency, w.metrics.senderUp} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register worker metrics: %w", err)
			}
		}
	}
	w.books = &batcher[bookOp, bookResult]{run: bookkeeping(store, cfg.Lease), max: maxGroup, timeout: storeTimeout}
	prober, _ := sender.(Prober)
	w.gate = newGate(prober, cfg, w.metrics.senderUp)
	if cfg.Rate > 0 {
		w.limiter = rate.NewLimiter(rate.Limit(cfg.Rate), max(1, int(cfg.Rate)))
	}
	return w, nil
}

// SenderStatus reports whether the worker sends (the mail server takes
// mail, as far as it knows), and when not, why: the server is down or
// throttling, with the last reason it gave. herald_sender_up says the
// same.
func (w *Worker) SenderStatus() (up bool, reason string) {
	return w.gate.status()
}

// Run consumes until ctx ends, then waits for in-flight deliveries.
func (w *Worker) Run(ctx context.Context) error {
	err := w.src.Consume(ctx, w.Handle)
	if ctx.Err() != nil {
		w.log.Info("worker stopped", "handed_back", w.handedBack.Load())
	}
	return err
}

// errBusy: another delivery of the notification holds the claim; this one
// was handed back.
var errBusy = errors.New("notification claimed by another delivery")

// errDeferred: the mail server is down or throttling; the delivery was
// handed back with no attempt spent.
var errDeferred = errors.New("mail server unavailable: delivery handed back, no attempt spent")

// errRateHeld: the delivery's turn under the rate limit was further away
// than a delivery may wait; it was handed back, with no attempt spent.
var errRateHeld = errors.New("rate limit: turn too far away, delivery handed back")

// errNoTimeLeft: the claim took so long that its lease leaves no time for
// a send and its record; the claim was released and the delivery handed
// back, with no attempt spent.
var errNoTimeLeft = errors.New("claim took too long: no time left in its lease for a send")

// Handle applies one delivery and settles it.
func (w *Worker) Handle(ctx context.Context, d notify.Delivery) {
	msg := d.Message()
	outcome, err := w.apply(ctx, d, msg)
	if err != nil && ctx.Err() != nil {
		w.handedBack.Add(1)
	}
	switch {
	case err == nil:
	case errors.Is(err, errBusy), errors.Is(err, errDeferred), errors.Is(err, errHeld), errors.Is(err, errRateHeld):
		// Expected while a claim runs, the server is down or the rate
		// limit is reached; the gate logs the outage once.
		w.log.Debug("delivery handed back", "message_id", msg.ID, "reason", err)
		return
	default:
		w.log.Error("delivery not settled; it will come back", "message_id", msg.ID, "retry_count", msg.RetryCount, "err", err)
		return
	}
	w.metrics.deliveries.WithLabelValues(string(outcome)).Inc()
	if outcome == notify.OutcomeSent && !msg.OccurredAt.IsZero() {
		w.metrics.latency.Observe(time.Since(msg.OccurredAt).Seconds())
	}
}

// apply runs one delivery to its settlement. An error means the delivery was
// not settled (it was handed back, or stays with the transport, and is
// redelivered).
func (w *Worker) apply(ctx context.Context, d notify.Delivery, msg notify.Message) (notify.Outcome, error) {
	req, nid, err := msg.Decode()
	if err != nil {
		return w.undecodable(ctx, d, msg, err)
	}
	trial, err := w.gate.enter(ctx)
	if err != nil {
		return "", w.release(ctx, d, 0, err)
	}
	reported := false
	defer func() {
		if !reported {
			w.gate.abandon(trial)
		}
	}()
	if pause, err := w.waitTurn(ctx); err != nil {
		return "", w.release(ctx, d, pause, err)
	}

	// The lease runs from the claim's transaction, which starts after this;
	// measured from here, the send's deadline is on the safe side.
	claimStart := time.Now()
	c, err := w.claim(msg, nid)
	if err != nil {
		return "", w.release(ctx, d, w.cfg.StoreBackoff, err)
	}
	switch c.Status {
	case notify.ClaimDuplicate:
		return w.ack(ctx, d, notify.OutcomeDuplicate)
	case notify.ClaimMissing:
		return w.settleDead(ctx, d, msg, nid, notify.Permanent(fmt.Errorf("notification %d: %w", nid, notify.ErrNotFound)))
	case notify.ClaimBusy:
		return "", w.release(ctx, d, w.cfg.StoreBackoff, errBusy)
	}

	// The send must end in time for its record to commit within the lease.
	deadline := time.Now().Add(w.cfg.SendTimeout)
	cut := false // the lease, a limit of this worker's, bounds the send
	if byLease := claimStart.Add(w.cfg.Lease - storeTimeout - leaseMargin); byLease.Before(deadline) {
		deadline, cut = byLease, true
	}
	if !time.Now().Before(deadline) {
		res := notify.DeliveryResult{Claim: c, Outcome: notify.AttemptDeferred, Error: errNoTimeLeft.Error()}
		if _, err := w.recordUntilCommitted(ctx, res); err != nil {
			return "", w.release(ctx, d, w.cfg.StoreBackoff, err)
		}
		return "", w.release(ctx, d, w.cfg.StoreBackoff, errNoTimeLeft)
	}
	sctx, cancel := context.WithDeadline(ctx, deadline)
	sendErr := w.sender.Send(sctx, notify.NewEmail(req, w.cfg.From))
	// A send that ran out of the time this worker's own lease left it says
	// nothing about the message: no attempt is spent on it.
	ownLimit := cut && sendErr != nil && errors.Is(sctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	cancel()
	if sendErr == nil || ctx.Err() == nil {
		// A send this worker cut short as it stops says nothing about the
		// server: its turn, if it was the trial, is abandoned.
		w.gate.report(trial, sendErr)
		reported = true
	}
	if sendErr == nil {
		w.cfg.Crash("after-send")
	}

	res := notify.DeliveryResult{Claim: c, Outcome: notify.AttemptSent}
	if sendErr != nil {
		res.Error = sendErr.Error()
		_, throttled := notify.IsThrottled(sendErr)
		switch {
		case throttled, notify.IsSenderDown(sendErr) && !w.cfg.OutageSpendsAttempts, ctx.Err() != nil, ownLimit:
			// The server failed or asked to slow down, or this worker is
			// stopping and cut the send short: no fault of the message, no
			// attempt spent.
			res.Outcome = notify.AttemptDeferred
		case notify.IsPermanent(sendErr) || msg.RetryCount >= w.cfg.MaxRetries:
			res.Outcome = notify.AttemptDead
		default:
			res.Outcome = notify.AttemptRetry
			res.RetryIn = w.retryDelay(msg.RetryCount)
		}
	}
	recorded, err := w.recordUntilCommitted(ctx, res)
	if err != nil {
		// The worker stopped and the store stayed unreachable through the
		// grace: the claim stays until its lease runs out; the redelivery
		// waits for it and then repeats the send (for a sent mail, the one
		// accepted duplicate, with the same Message-ID).
		return "", w.release(ctx, d, w.cfg.StoreBackoff, err)
	}
	if !recorded {
		// The lease ran out during the send and another delivery took the
		// claim over (or settled the notification): its result stands, and
		// this copy is done.
		w.log.Warn("claim lost during the send; the delivery that took it over decides", "message_id", msg.ID,
			"notification_id", nid, "outcome", res.Outcome)
		return w.ack(ctx, d, notify.OutcomeDuplicate)
	}
	switch res.Outcome {
	case notify.AttemptSent:
		w.cfg.Crash("after-commit")
		return w.ack(ctx, d, notify.OutcomeSent)
	case notify.AttemptDeferred:
		return "", w.release(ctx, d, 0, errDeferred)
	case notify.AttemptRetry:
		if err := d.Retry(ctx, res.Error); err != nil {
			return "", w.release(ctx, d, w.cfg.StoreBackoff, fmt.Errorf("schedule retry: %w", err))
		}
		w.log.Warn("delivery failed; retry scheduled", "message_id", msg.ID, "notification_id", nid,
			"retry", msg.RetryCount+1, "err", res.Error)
		return notify.OutcomeRetried, nil
	default:
		return w.settleDead(ctx, d, msg, nid, sendErr)
	}
}

// waitTurn waits for the delivery's turn under the rate limit, on the
// delivery's ctx. A turn further away than a delivery may wait is given
// back (errRateHeld) with the pause after which it would be near enough.
func (w *Worker) waitTurn(ctx context.Context) (pause time.Duration, err error) {
	if w.limiter == nil {
		return 0, nil
	}
	r := w.limiter.Reserve()
	wait := r.Delay()
	if wait > w.cfg.SenderBackoffMax {
		r.Cancel()
		return min(wait-w.cfg.SenderBackoffMax, w.cfg.SenderBackoffMax), errRateHeld
	}
	if wait <= 0 {
		return 0, nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return 0, nil
	case <-ctx.Done():
		r.Cancel()
		return 0, ctx.Err()
	}
}

// recordUntilCommitted records res, again and again with a growing pause
// while the store fails: the send happened (or was found not to), and a
// delivery handed back unrecorded would be sent again once the lease ran
// out. It gives up only once ctx has ended and recordGrace has passed
// since.
func (w *Worker) recordUntilCommitted(ctx context.Context, res notify.DeliveryResult) (bool, error) {
	pause := recordBackoff
	done := ctx.Done()
	var giveUp time.Time
	for failures := 0; ; failures++ {
		recorded, err := w.record(res)
		if err == nil {
			if failures > 0 {
				w.log.Info("outcome recorded after store failures", "message_id", res.Claim.MessageID,
					"outcome", res.Outcome, "failures", failures)
			}
			return recorded, nil
		}
		if failures == 0 {
			w.log.Warn("outcome not recorded; retrying until it commits", "message_id", res.Claim.MessageID,
				"outcome", res.Outcome, "err", err)
		}
		if !giveUp.IsZero() && !time.Now().Before(giveUp) {
			return false, err
		}
		wait := pause
		if !giveUp.IsZero() {
			wait = min(wait, time.Until(giveUp))
		}
		t := time.NewTimer(wait)
	waiting:
		for {
			select {
			case <-t.C:
				break waiting
			case <-done:
				done = nil
				giveUp = time.Now().Add(recordGrace)
			}
		}
		pause = min(2*pause, recordBackoffMax)
	}
}

func (w *Worker) ack(ctx context.Context, d notify.Delivery, outcome notify.Outcome) (notify.Outcome, error) {
	if err := d.Ack(ctx); err != nil {
		return "", fmt.Errorf("ack: %w", err)
	}
	return outcome, nil
}

// deadLetter records cause as the notification's end (when the message
// names one) through a claim and a dead record, then hands the message to
// the dead letters. The database is the record of dead letters (herald dlq
// reads it); a crash between the two steps leaves the notification failed
// and the redelivery is absorbed as a duplicate.
func (w *Worker) deadLetter(ctx context.Context, d notify.Delivery, msg notify.Message, nid int64, cause error) (notify.Outcome, error) {
	if nid == 0 {
		return w.settleDead(ctx, d, msg, 0, cause)
	}
	c, err := w.claim(msg, nid)
	if err != nil {
		return "", w.release(ctx, d, w.cfg.StoreBackoff, err)
	}
	switch c.Status {
	case notify.ClaimDuplicate, notify.ClaimMissing:
		// The notification was settled by another message (or does not
		// exist): this message's defect does not change it, but the
		// message itself is still poison.
		return w.settleDead(ctx, d, msg, nid, cause)
	case notify.ClaimBusy:
		return "", w.release(ctx, d, w.cfg.StoreBackoff, errBusy)
	}
	// Recorded, or settled by another delivery meanwhile (the record
	// reports false): either way the message goes to the dead letters.
	if _, err := w.recordUntilCommitted(ctx, notify.DeliveryResult{Claim: c, Outcome: notify.AttemptDead, Error: cause.Error()}); err != nil {
		return "", w.release(ctx, d, w.cfg.StoreBackoff, err)
	}
	return w.settleDead(ctx, d, msg, nid, cause)
}

// settleDead hands the message to the transport's dead letters.
func (w *Worker) settleDead(ctx context.Context, d notify.Delivery, msg notify.Message, nid int64, cause error) (notify.Outcome, error) {
	reason := cause.Error()
	if err := d.DeadLetter(ctx, reason); err != nil {
		return "", w.release(ctx, d, w.cfg.StoreBackoff, fmt.Errorf("dead-letter: %w", err))
	}
	w.log.Error("delivery dead-lettered", "message_id", msg.ID, "notification_id", nid,
		"retries", msg.RetryCount, "permanent", notify.IsPermanent(cause), "err", reason)
	return notify.OutcomeDead, nil
}

// undecodable dead-letters a message that can never be applied. When its
// payload still names a notification, that notification is failed with the
// reason, or it would stay pending for ever.
func (w *Worker) undecodable(ctx context.Context, d notify.Delivery, msg notify.Message, cause error) (notify.Outcome, error) {
	nid, ok := namedNotification(msg)
	if !ok {
		return w.settleDead(ctx, d, msg, 0, cause)
	}
	return w.deadLetter(ctx, d, msg, nid, cause)
}

// notificationIDField finds the notification_id of a payload that is not
// valid JSON (cut short, say) but still names it.
var notificationIDField = regexp.MustCompile(`"notification_id"\s*:\s*"([0-9]+)"`)

// namedNotification returns the notification a notification.requested
// message names, however malformed the rest of its payload.
func namedNotification(msg notify.Message) (int64, bool) {
	if msg.Type != notify.EventRequested {
		return 0, false
	}
	var p struct {
		NotificationID string `json:"notification_id"`
	}
	if err := json.Unmarshal(msg.Payload, &p); err == nil {
		return notify.ParseID(p.NotificationID)
	}
	m := notificationIDField.FindSubmatch(msg.Payload)
	if m == nil {
		return 0, false
	}
	return notify.ParseID(string(m[1]))
}

// release pauses, then hands the delivery back. The pause keeps a store
// outage, a busy claim or a failing transport from turning into a hot
// redelivery loop.
func (w *Worker) release(ctx context.Context, d notify.Delivery, pause time.Duration, cause error) error {
	if pause > 0 {
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	if err := d.Release(context.WithoutCancel(ctx)); err != nil {
		return errors.Join(cause, fmt.Errorf("release: %w", err))
	}
	return cause
}

// retryDelay is the wait before the retry that follows retries retries.
func (w *Worker) retryDelay(retries int) time.Duration {
	d := w.cfg.RetryDelays
	if len(d) == 0 {
		return 0
	}
	return d[min(retries, len(d)-1)]
}
