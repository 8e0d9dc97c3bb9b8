package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldhq/herald/internal/notify"
)

// EventPublisher hands events to a sink that answers for each event on its
// own (the status webhook: one request per event), so that one event's
// refusal can be retried and dead-lettered without holding up the others.
type EventPublisher interface {
	// PublishEach publishes every event and returns one error per event,
	// in the order of events: nil when the sink confirmed it, otherwise
	// marked as notify's markers say: notify.Permanent (the sink refuses
	// this event; retrying cannot help), notify.Throttled (the sink asks
	// this event to wait; no attempt spent), notify.SenderDown (nothing
	// reached the sink, or the event was not tried: the sink's outage, no
	// attempt spent); unmarked, a failed attempt of this event.
	PublishEach(ctx context.Context, events []notify.Event) []error
}

// ParkedError is returned by a Publisher, alone or inside errors.Join, for
// the events it did not confirm because each waits for its own due time (a
// retry, a Retry-After). It is no outage: the relay does not back off for
// it, and its next claims take as many rows more, so that parked rows
// (the oldest unprocessed ones, claimed in id order) never take the
// places of the others.
type ParkedError struct {
	// IDs are the outbox ids of the parked events.
	IDs []int64
}

func (e *ParkedError) Error() string {
	return fmt.Sprintf("%d events wait for their retry", len(e.IDs))
}

// RetryConfig configures a Retrier. MaxRetries and Delays have no default
// here: they come from where the configuration is read (HERALD_MAX_RETRIES,
// HERALD_RETRY_DELAY).
type RetryConfig struct {
	// MaxRetries is the number of retries after an event's first failed
	// attempt; the failure after them dead-letters it. Zero dead-letters
	// an event at its first failure; it must not be negative.
	MaxRetries int
	// Delays are the waits before each retry in turn, the last one
	// repeating. Empty means no wait: a retry goes with the relay's next
	// batch (still bounded by MaxRetries). None may be negative.
	Delays []time.Duration
	// Capacity bounds the events held for a retry at once. Beyond it new
	// events are not tried (no attempt spent): the sink is failing most
	// of what it gets, and the relay backs off as for an outage. Zero
	// means the default, 1000; it must not be negative.
	Capacity int
	// Name labels the metrics (relay="..."), as Config.Name. Default:
	// "status".
	Name string
	// Logger receives one ERROR record per dead-lettered event. Default:
	// discard.
	Logger *slog.Logger
	// Registerer, when set, receives the metrics.
	Registerer prometheus.Registerer
}

func (c RetryConfig) withDefaults() RetryConfig {
	c.Capacity = cmp.Or(c.Capacity, 1000)
	c.Name = cmp.Or(c.Name, "status")
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	return c
}

func (c RetryConfig) validate() error {
	if c.MaxRetries < 0 {
		return fmt.Errorf("retry: max retries must not be negative, got %d", c.MaxRetries)
	}
	if c.Capacity < 1 {
		return fmt.Errorf("retry: capacity must be at least 1, got %d", c.Capacity)
	}
	for _, d := range c.Delays {
		if d < 0 {
			return fmt.Errorf("retry: delays must not be negative, got %s", d)
		}
	}
	return nil
}

const (
	// throttleBase and throttleMax bound the wait of an event throttled
	// without a Retry-After: it doubles with each throttled try.
	throttleBase = time.Second
	throttleMax  = time.Minute
	// outageMax caps the wait between the tries of an event while the
	// sink fails everything (see Retrier): an outage, no attempt spent;
	// the sink is seen back within it.
	outageMax = 5 * time.Second
	// minHealthWindow is the least time after the sink's last 2xx during
	// which it counts as up (see Retrier).
	minHealthWindow = time.Minute
	// forgetAfter drops the state of an event not offered for this long:
	// its row was taken over by another relay process, or marked after all
	// (the relay offers a parked row with every batch, at least every
	// MaxBackoff, while it is unprocessed).
	forgetAfter = 10 * time.Minute
)

// Retrier is a Publisher over an EventPublisher that retries each event the
// sink refuses on its own schedule and dead-letters it after its attempts,
// without holding up the other events:
//
//   - a failed attempt (5xx, 408, a timeout) parks the event until its next
//     retry (Delays), up to MaxRetries; the failure after them dead-letters
//     it;
//   - a permanent refusal (a 4xx but 408 and 429) dead-letters it at once;
//   - a throttle (429, Retry-After) parks it for the wait asked, or for a
//     growing backoff, without spending an attempt;
//   - an outage (nothing reached the sink) spends nothing and is returned as
//     an error: the relay backs off as for a down broker;
//   - a failure (5xx, 408, timeout) while the sink accepted no event at all
//     within the last retry delay (at least a minute) is the sink's outage
//     too (down for maintenance, answering 503 to all): it spends no
//     attempt, and the event is tried again after a growing wait of at
//     most 5s, so that the events of a maintenance window go once it
//     ends rather than being dead-lettered. An event refused while the
//     sink accepts others spends its attempts.
//
// Parked events are reported in a ParkedError and not offered to the sink
// until they are due. A dead-lettered event is confirmed (its row is marked
// processed: the sink has given up on it), logged at ERROR with its reason
// and counted in herald_relay_dead_letters_total.
//
// The schedule is kept in memory: a restart, or another relay process
// taking the row over, starts the event's attempts afresh (at most
// MaxRetries+1 attempts per process, never an unbounded number).
type Retrier struct {
	sink EventPublisher
	cfg  RetryConfig
	log  *slog.Logger

	deadLetters prometheus.Counter
	retries     prometheus.Counter
	parked      prometheus.Gauge

	// healthWindow is how long after its last 2xx the sink counts as up:
	// the longest retry delay, at least minHealthWindow.
	healthWindow time.Duration

	mu    sync.Mutex
	state map[int64]*retryState
	// lastAccepted is when the sink last confirmed an event.
	lastAccepted time.Time
}

type retryState struct {
	attempts int // failed attempts so far
	waits    int // tries since the last attempt that spent none (throttled, the sink's outage)
	due      time.Time
	seen     time.Time
}

// NewRetrier returns a Retrier over sink.
func NewRetrier(sink EventPublisher, cfg RetryConfig) (*Retrier, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	labels := prometheus.Labels{"relay": cfg.Name}
	window := minHealthWindow
	for _, d := range cfg.Delays {
		window = max(window, d)
	}
	r := &Retrier{sink: sink, cfg: cfg, log: cfg.Logger, state: map[int64]*retryState{}, healthWindow: window,
		deadLetters: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "herald_relay_dead_letters_total",
			Help:        "Events the relay's sink refused for good (permanently, or after their retries) and the relay gave up on.",
			ConstLabels: labels,
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "herald_relay_retries_total",
			Help:        "Failed attempts of single events that the relay's sink refused and that wait for a retry.",
			ConstLabels: labels,
		}),
		parked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "herald_relay_parked_events",
			Help:        "Events waiting for a retry (or for a Retry-After) of the relay's sink.",
			ConstLabels: labels,
		}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{r.deadLetters, r.retries, r.parked} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register relay retry metrics: %w", err)
			}
		}
	}
	return r, nil
}

// Publish offers the due events to the sink and returns the ids it
// confirmed or that were dead-lettered. Its error joins a ParkedError (the
// events waiting for their due time) and what stands for an outage (the
// sink down, events not tried because Capacity is reached).
func (r *Retrier) Publish(ctx context.Context, events []notify.Event) ([]int64, error) {
	now := time.Now()
	var (
		try    []notify.Event
		parked []int64
		held   int
	)
	r.mu.Lock()
	r.forget(now)
	free := r.cfg.Capacity - len(r.state)
	for _, e := range events {
		st, ok := r.state[e.ID]
		switch {
		case ok && st.due.After(now):
			st.seen = now
			parked = append(parked, e.ID)
		case ok:
			st.seen = now
			try = append(try, e)
		case free > 0:
			// A slot for each new event tried, in case it fails.
			free--
			try = append(try, e)
		default:
			held++
		}
	}
	r.mu.Unlock()

	var errs []error
	if held > 0 {
		errs = append(errs, fmt.Errorf("%d events not tried: %d events already wait for a retry", held, r.cfg.Capacity))
	}
	var confirmed []int64
	if len(try) > 0 {
		var outages []error
		confirmed, parked, outages = r.settle(ctx, try, r.sink.PublishEach(ctx, try), parked)
		if len(outages) > 3 {
			outages = append(outages[:3], fmt.Errorf("and %d more", len(outages)-3))
		}
		errs = append(errs, outages...)
	}
	if len(parked) > 0 {
		errs = append(errs, &ParkedError{IDs: parked})
	}
	return confirmed, errors.Join(errs...)
}

// settle applies the sink's answer for each tried event.
func (r *Retrier) settle(ctx context.Context, try []notify.Event, errs []error, parked []int64) (confirmed, _ []int64, outages []error) {
	if len(errs) != len(try) {
		// A confused sink: nothing is known of any event.
		return nil, parked, []error{fmt.Errorf("sink answered %d of %d events", len(errs), len(try))}
	}
	now := time.Now()
	r.mu.Lock()
	defer func() {
		r.parked.Set(float64(len(r.state)))
		r.mu.Unlock()
	}()
	for _, err := range errs {
		if err == nil {
			r.lastAccepted = now
			break
		}
	}
	up := now.Sub(r.lastAccepted) <= r.healthWindow
	for i, e := range try {
		err := errs[i]
		st := r.state[e.ID]
		if err == nil {
			delete(r.state, e.ID)
			confirmed = append(confirmed, e.ID)
			continue
		}
		if ctx.Err() != nil || notify.IsSenderDown(err) {
			// The sink's outage, or the batch's end: not this event's
			// attempt.
			outages = append(outages, err)
			continue
		}
		if st == nil {
			st = &retryState{seen: now}
			r.state[e.ID] = st
		}
		if after, ok := notify.IsThrottled(err); ok {
			st.waits++
			if after <= 0 {
				after = min(throttleBase<<min(st.waits-1, 6), throttleMax)
			}
			st.due = now.Add(after)
			parked = append(parked, e.ID)
			continue
		}
		permanent := notify.IsPermanent(err)
		if !permanent && !up {
			st.waits++
			st.due = now.Add(min(throttleBase<<min(st.waits-1, 6), outageMax))
			parked = append(parked, e.ID)
			continue
		}
		st.attempts++
		st.waits = 0
		if permanent || st.attempts > r.cfg.MaxRetries {
			r.deadLetter(e, st.attempts, permanent, err)
			delete(r.state, e.ID)
			confirmed = append(confirmed, e.ID)
			continue
		}
		r.retries.Inc()
		st.due = now.Add(r.delay(st.attempts - 1))
		parked = append(parked, e.ID)
	}
	return confirmed, parked, outages
}

// delay is the wait before the retry that follows retries retries.
func (r *Retrier) delay(retries int) time.Duration {
	d := r.cfg.Delays
	if len(d) == 0 {
		return 0
	}
	return d[min(retries, len(d)-1)]
}

// deadLetter logs and counts an event given up on.
func (r *Retrier) deadLetter(e notify.Event, attempts int, permanent bool, err error) {
	r.deadLetters.Inc()
	attrs := []any{"relay", r.cfg.Name, "event_id", e.ID, "type", e.Type, "attempts", attempts, "permanent", permanent, "err", err}
	if ev, derr := notify.DecodeStatus(e.Payload); derr == nil {
		attrs = append(attrs, "notification_id", ev.NotificationID)
	}
	r.log.Error("event dead-lettered: the sink refused it; marked processed without it", attrs...)
}

// forget drops the state of events not offered for forgetAfter. The caller
// holds mu.
func (r *Retrier) forget(now time.Time) {
	for id, st := range r.state {
		if now.Sub(st.seen) > forgetAfter {
			delete(r.state, id)
		}
	}
}
