// Package worker applies deliveries: it sends each notification once per
// message id, through the sender of the notification's channel, retries
// transient failures and dead-letters the rest. It knows "a sender of this
// channel" and an outcome, never the provider (SMTP, HTTP) behind it.
//
// Each delivery is claimed, sent and recorded: the claim (a lease on the
// message id and on the notification) commits before the send, the send
// runs with no transaction open, and the record commits its outcome after
// it. The claims and the records of concurrent deliveries go to the store
// in groups, one transaction each. Concurrency comes from the transport's
// prefetch, not from database connections.
package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/tracing"
)

// Config tunes a Worker. A zero that means something is honoured (no
// retries); only values where zero is meaningless get a default.
type Config struct {
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
	// Lease is how long a claim holds the message id and the notification:
	// after it another delivery of the notification may take the claim over
	// and send again (the holder is presumed to have died between its send
	// and its record). It must cover what a living holder does with it: the
	// claim's transaction, the send and the record's transaction, so it must
	// be longer than the longest channel's SendTimeout plus two store
	// transactions (20s): one lease serves every channel, as the claims of
	// all channels go to the store in one group. Zero means the default.
	// Default DefaultLease(the longest channel's SendTimeout).
	Lease time.Duration
	// SenderBackoff is the first pause after a channel's provider (or one
	// destination of it) went down or throttled: when it has passed, one delivery probes (Prober) and then
	// tries one real send; each failed probe or try doubles it, up to
	// SenderBackoffMax, with jitter, and only a sent notification resets
	// it. A delivery to a paused provider or destination is parked until
	// its next turn. Zero means the default. Default 1s.
	SenderBackoff time.Duration
	// SenderBackoffMax caps that pause. Zero means the default. Default
	// 60s.
	SenderBackoffMax time.Duration
	// OutageSpendsAttempts makes a send that failed because the provider
	// is down (notify.SenderDown) the message's attempt, retried and
	// dead-lettered like any failure, and it leaves the gate open.
	// Throttling never spends an attempt. Default false: an outage spends
	// none, and sends pause until the provider is back.
	OutageSpendsAttempts bool
	// Sends is the most sends under way at once in this worker, over every
	// channel (HERALD_PREFETCH). A delivery takes a send slot last, once
	// its channel's and destination's gates, its rate turn and its places
	// admitted it (so that one channel's wait never holds a slot others
	// need), and gives it back as soon as its send returns: the record of
	// the outcome and the acknowledgement to the transport hold none. A transport that hands
	// the worker Window(Sends) deliveries at once keeps the slots busy
	// while the deliveries that have sent record their outcomes, in large
	// groups. Zero means no limit of the worker's own: the transport's
	// prefetch bounds the sends. It must not be negative.
	Sends int
	// Patience is the longest a delivery waits in place (for its rate turn,
	// or for a place under a channel's or destination's concurrency or the
	// worker's Sends) before it is parked: handed back to the transport
	// with the time it may go, holding nothing. It must stay well below the
	// transport's own lease on a delivery (the table transport's row lease,
	// SQS's visibility timeout), which covers it. Zero means the default.
	// Default 2s.
	Patience time.Duration
	// Destinations, when set, keeps the persisted record of the
	// destinations that are not up: the worker writes it as gates close
	// and open, disables a destination failing for longer than
	// DisableAfter, and dead-letters the deliveries to a disabled one.
	// Default: none (gates live in this worker's memory only).
	Destinations DestinationBook
	// DisableAfter is how long a destination may fail before it is
	// disabled (HERALD_DESTINATION_DISABLE_AFTER), measured from its
	// first failure as the record keeps it. Zero: never. Only with
	// Destinations.
	DisableAfter time.Duration
	// RetryDelays is the retry schedule the transport follows (the i-th
	// retry waits the i-th delay, the last repeating), so that the store
	// can record when a retry is due. Empty: due at once.
	RetryDelays []time.Duration
	// Logger receives one record per failed delivery, and one when a
	// channel's provider goes down and comes back. Default: discard.
	Logger *slog.Logger
	// Registerer, when set, receives the worker's metrics. Default: none.
	Registerer prometheus.Registerer
	// TracerProvider, when set, traces every delivery: a process span, a
	// child of the message's traceparent (the relay's publish span, or for
	// the outbox table the create's), with claim, send and record spans
	// under it. A retry copy carries the same traceparent, so each attempt
	// is a sibling under the publish. Default: nil (no spans).
	TracerProvider trace.TracerProvider
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

// holdPerSend is how many deliveries a worker is handed per send slot
// (Window): the one sending, and the ones waiting for the slot or recording
// and acknowledging an outcome. A delivery spends most of its time with a
// fast provider in those store round trips, not in its send; holding only as
// many as it sends starved the groups. Measured with herald bench
// (PostgreSQL outbox table, 0 ms SMTP, 32 send slots, 5000 creates):
// delivered 0.60x creates with 1 per slot, 0.79x with 2, 0.98x with 4.
const holdPerSend = 4

// Window is the number of deliveries a transport should hand at once to a
// worker whose Config.Sends is sends: holdPerSend per send slot.
func Window(sends int) int { return holdPerSend * sends }

// maxGroup caps the deliveries one claim or record transaction serves.
const maxGroup = 256

// Channel is one channel the worker delivers on: its sender and its
// limits. Every field but Sender has a default.
type Channel struct {
	// Sender sends the channel's notifications. When it also implements
	// Prober, the worker probes with it while the provider is down; when it
	// implements Destinations, it keeps a gate per destination.
	Sender Sender
	// Provider names the channel's provider in the logs and in
	// SenderStatus ("mail server"). Default "<channel> provider".
	Provider string
	// SendTimeout bounds each send. It should be the sender's own timeout
	// (the SMTP sender's Timeout), so that the worker never gives up on a
	// send the sender still runs. A send is also cut short where the claim's
	// lease, as measured here, no longer leaves time to record it. Zero
	// means the default. Default 30s.
	SendTimeout time.Duration
	// Rate is the most sends per second this worker makes on the channel
	// (a provider's limit, HERALD_<CHANNEL>_RATE), in bursts of up to one
	// second's worth (at least one). A delivery waits for its turn before
	// its claim, so the wait is neither part of the send's timeout nor an
	// attempt; a turn further away than Config.SenderBackoffMax is not
	// waited for: the delivery is handed back. Zero means no limit; it must
	// not be negative.
	Rate float64
	// Concurrency is the most of the channel's sends under way at once
	// (HERALD_<CHANNEL>_CONCURRENCY; a delivery waits for a slot before its
	// claim, like a rate turn, and gives it back when its send returns).
	// With a Rate, it may be at most what the rate lets through in
	// Config.SenderBackoffMax, or deliveries would queue for turns they
	// cannot wait for. Zero means no limit of the channel's own:
	// Config.Sends (or the transport's prefetch) bounds it.
	Concurrency int
	// DestinationConcurrency is the most sends to one destination of the
	// channel at once (a webhook endpoint; for a Sender that implements
	// Destinations), so that one destination with a long backlog takes no
	// more than its share of the channel's sends: deliveries beyond it wait
	// briefly, then are parked, and the other destinations' go first. Zero
	// means no share of its own. It must not be negative.
	DestinationConcurrency int
}

func (c Channel) withDefaults(name string) Channel {
	c.Provider = cmp.Or(c.Provider, name+" provider")
	c.SendTimeout = cmp.Or(c.SendTimeout, defaultSendTimeout)
	return c
}

func (c Channel) validate() error {
	switch {
	case c.Sender == nil:
		return errors.New("no sender")
	case c.SendTimeout < 0:
		return fmt.Errorf("send timeout must not be negative, got %s", c.SendTimeout)
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("rate must be a non-negative number of sends per second, got %g", c.Rate)
	case c.Concurrency < 0:
		return fmt.Errorf("concurrency must not be negative, got %d", c.Concurrency)
	case c.DestinationConcurrency < 0:
		return fmt.Errorf("destination concurrency must not be negative, got %d", c.DestinationConcurrency)
	}
	return nil
}

// longestTimeout is the longest SendTimeout of channels (with defaults).
func longestTimeout(channels map[string]Channel) time.Duration {
	var longest time.Duration
	for name, ch := range channels {
		longest = max(longest, ch.withDefaults(name).SendTimeout)
	}
	return longest
}

func (c Config) withDefaults(longest time.Duration) Config {
	c.StoreBackoff = cmp.Or(c.StoreBackoff, 5*time.Second)
	c.Lease = cmp.Or(c.Lease, DefaultLease(longest))
	c.SenderBackoff = cmp.Or(c.SenderBackoff, time.Second)
	c.Patience = cmp.Or(c.Patience, 2*time.Second)
	c.SenderBackoffMax = cmp.Or(c.SenderBackoffMax, 60*time.Second)
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	if c.Crash == nil {
		c.Crash = func(string) {}
	}
	return c
}

func (c Config) validate(longest time.Duration) error {
	switch {
	case c.MaxRetries < 0:
		return fmt.Errorf("max retries must not be negative, got %d", c.MaxRetries)
	case c.StoreBackoff < 0:
		return fmt.Errorf("store backoff must not be negative, got %s", c.StoreBackoff)
	case c.Lease <= longest+2*storeTimeout:
		return fmt.Errorf("lease (%s) must be longer than the send timeout (%s) plus two store transactions (%s each): the claim's and the record's",
			c.Lease, longest, storeTimeout)
	case c.DisableAfter < 0:
		return fmt.Errorf("disable after must not be negative, got %s", c.DisableAfter)
	case c.Patience < 0:
		return fmt.Errorf("patience must not be negative, got %s", c.Patience)
	case c.Sends < 0:
		return fmt.Errorf("sends must not be negative, got %d", c.Sends)
	case c.SenderBackoff < 0 || c.SenderBackoffMax < c.SenderBackoff:
		return fmt.Errorf("sender backoff must be positive and at most its maximum, got %s and %s", c.SenderBackoff, c.SenderBackoffMax)
	}
	return nil
}

// Worker consumes deliveries from a Source and applies them.
type Worker struct {
	src     Source
	cfg     Config
	log     *slog.Logger
	metrics metrics
	tracer  trace.Tracer
	books   *batcher[bookOp, bookResult]
	lanes   map[string]*lane
	names   []string // the channels, sorted
	sends   *sendSlots
	book    *destBook // nil without Config.Destinations // the send slots; nil without Config.Sends

	// handedBack counts the deliveries that ended unsettled after shutdown
	// began (the transport redelivers them), for the "worker stopped" log.
	handedBack atomic.Int64
}

// unknownChannel is the channel label of a delivery whose channel could not
// be read or has no sender here, so that a bad payload cannot add labels.
const unknownChannel = "unknown"

type metrics struct {
	deliveries *prometheus.CounterVec
	latency    prometheus.Histogram
	senderUp   *prometheus.GaugeVec
	// brokerWait is the time a message's first copy spent in the broker,
	// from the relay's publish to its arrival at this worker.
	brokerWait prometheus.Histogram
	// send is the time of each send to a channel's provider.
	send *prometheus.HistogramVec
	// parked counts the deliveries parked, by channel and reason.
	parked *prometheus.CounterVec
}

// New returns a Worker that delivers on channels, by name. A message of a
// channel not among them is dead-lettered at once, with the reason.
func New(src Source, store Bookkeeper, channels map[string]Channel, cfg Config) (*Worker, error) {
	if len(channels) == 0 {
		return nil, errors.New("no channel to deliver on")
	}
	longest := longestTimeout(channels)
	cfg = cfg.withDefaults(longest)
	if err := cfg.validate(longest); err != nil {
		return nil, err
	}
	w := &Worker{src: src, cfg: cfg, log: slog.New(tracing.NewLogHandler(cfg.Logger.Handler())), lanes: make(map[string]*lane, len(channels)), tracer: tracing.Tracer(cfg.TracerProvider)}
	w.metrics.deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_worker_deliveries_total",
		Help: "Deliveries handled by the worker, by channel and outcome.",
	}, []string{"channel", "outcome"})
	w.metrics.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "herald_delivery_seconds",
		Help:    "Time from a notification's create to its being sent.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800},
	})
	w.metrics.brokerWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "herald_broker_wait_seconds",
		Help:    "Time a message spent in the broker, from the relay's publish to its arrival at a worker (first deliveries, on transports that tell the publish time).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
	})
	w.metrics.send = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "herald_send_seconds",
		Help:    "Time of one send to the channel's provider, whatever its result.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"channel"})
	w.metrics.parked = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_worker_parked_total",
		Help: "Deliveries parked (handed back with the time they may go, holding nothing), by channel and reason: provider (its gate closed), destination (its gate closed), deferred (the send found the provider or destination down or throttling), rate, share (the channel's or destination's sends taken), busy (another delivery holds the claim).",
	}, []string{"channel", "reason"})
	w.metrics.senderUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "herald_sender_up",
		Help: "1 while the channel's provider takes sends, 0 while the worker has paused them because it is down or throttling.",
	}, []string{"channel"})
	if cfg.Destinations != nil {
		w.book = newDestBook(cfg.Destinations, cfg.DisableAfter, w.log)
	}
	for name, ch := range channels {
		ch = ch.withDefaults(name)
		if name == "" || name == unknownChannel {
			return nil, fmt.Errorf("channel name %q is reserved", name)
		}
		if err := ch.validate(); err != nil {
			return nil, fmt.Errorf("channel %s: %w", name, err)
		}
		prober, _ := ch.Sender.(Prober)
		l := &lane{name: name, sender: ch.Sender, timeout: ch.SendTimeout,
			gate: newGate(prober, ch.Provider, ch.SendTimeout, cfg, w.metrics.senderUp.WithLabelValues(name))}
		l.gate.book, l.gate.key = w.book, name
		if d, ok := ch.Sender.(Destinations); ok {
			l.dests = d
			l.dgates = newDestGates(ch.Provider, cfg)
			l.dgates.channel, l.dgates.book = name, w.book
		}
		if ch.Rate > 0 {
			l.limiter = rate.NewLimiter(rate.Limit(ch.Rate), max(1, int(ch.Rate)))
		}
		if ch.Concurrency > 0 {
			l.slots = newPool("", ch.Concurrency)
		}
		if l.dests != nil {
			l.destSends = ch.DestinationConcurrency
		}
		l.shares = make(map[string]*pool)
		l.tickets = make(map[int64]time.Time)
		w.lanes[name] = l
		w.names = append(w.names, name)
	}
	slices.Sort(w.names)
	for _, name := range append(slices.Clone(w.names), unknownChannel) {
		for _, o := range []notify.Outcome{notify.OutcomeSent, notify.OutcomeRetried, notify.OutcomeDead, notify.OutcomeDuplicate} {
			w.metrics.deliveries.WithLabelValues(name, string(o))
		}
		if name != unknownChannel {
			for _, r := range []error{errHeld, errDestHeld, errDeferred, errRateHeld, errShare, errBusy} {
				w.metrics.parked.WithLabelValues(name, parkReason(r))
			}
		}
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{w.metrics.deliveries, w.metrics.latency, w.metrics.senderUp, w.metrics.brokerWait, w.metrics.send, w.metrics.parked} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register worker metrics: %w", err)
			}
		}
	}
	if cfg.Sends > 0 {
		w.sends = newSendSlots(cfg.Sends)
	}
	w.books = &batcher[bookOp, bookResult]{run: bookkeeping(store, cfg.Lease), max: maxGroup, timeout: storeTimeout}
	return w, nil
}

// Channels returns the channels the worker delivers on, sorted.
func (w *Worker) Channels() []string { return slices.Clone(w.names) }

// ChannelStatus reports whether the worker sends on channel (its provider
// takes sends, as far as it knows), and when not, why: the provider is
// down or throttling, with the last reason it gave. herald_sender_up says
// the same. A paused destination of the channel does not make it down.
func (w *Worker) ChannelStatus(channel string) (up bool, reason string) {
	l, ok := w.lanes[channel]
	if !ok {
		return false, "no sender for channel " + channel
	}
	return l.gate.status()
}

// ChannelState is what the worker knows of one channel's provider.
type ChannelState struct {
	// Up: the provider takes sends, as far as the worker knows.
	Up bool
	// Class is why sends are paused when not Up: "down" or "throttled".
	Class string
	// Reason is the provider's last failure, for people.
	Reason string
	// Since is when sends were paused.
	Since time.Time
	// Next is the earliest time of the next probe or trial send: for a
	// throttled provider, at least its Retry-After.
	Next time.Time
	// PausedDestinations counts the destinations of the channel paused on
	// their own (a webhook endpoint down or throttling).
	PausedDestinations int
}

// ChannelState reports the state of channel's provider, and false for a
// channel the worker has no sender for.
func (w *Worker) ChannelState(channel string) (ChannelState, bool) {
	l, ok := w.lanes[channel]
	if !ok {
		return ChannelState{}, false
	}
	st := l.gate.state()
	st.PausedDestinations = w.PausedDestinations(channel)
	return st, true
}

// SenderStatus reports whether the worker sends on every channel, and when
// not, why (the first paused channel's reason).
func (w *Worker) SenderStatus() (up bool, reason string) {
	for _, name := range w.names {
		if up, reason := w.lanes[name].gate.status(); !up {
			return false, reason
		}
	}
	return true, ""
}

// PausedDestinations reports how many destinations of channel are paused
// (their own provider down or throttling).
func (w *Worker) PausedDestinations(channel string) int {
	l, ok := w.lanes[channel]
	if !ok || l.dgates == nil {
		return 0
	}
	return l.dgates.closed()
}

// Run consumes until ctx ends, then waits for in-flight deliveries.
func (w *Worker) Run(ctx context.Context) error {
	if w.book != nil {
		bctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			w.book.run(bctx)
		}()
		defer func() {
			cancel()
			<-done
		}()
	}
	err := w.src.Consume(ctx, w.Handle)
	if ctx.Err() != nil {
		w.log.Info("worker stopped", "handed_back", w.handedBack.Load())
	}
	return err
}

// errBusy: another delivery of the notification holds the claim; this one
// was handed back.
var errBusy = errors.New("notification claimed by another delivery")

// errDeferred: the provider (or the destination) is down or throttling;
// the delivery was handed back with no attempt spent.
var errDeferred = errors.New("provider unavailable: delivery handed back, no attempt spent")

// parkReason labels why a delivery was parked.
func parkReason(err error) string {
	switch {
	case errors.Is(err, errHeld):
		return "provider"
	case errors.Is(err, errDestHeld):
		return "destination"
	case errors.Is(err, errDeferred):
		return "deferred"
	case errors.Is(err, errRateHeld):
		return "rate"
	case errors.Is(err, errShare):
		return "share"
	default:
		return "busy"
	}
}

// errUnrecorded: the send's outcome could not be recorded (the store
// stayed unreachable through the stop's grace); the delivery is handed
// back and its send repeated once the claim's lease runs out.
var errUnrecorded = errors.New("outcome not recorded")

// errNoTimeLeft: the claim took so long that its lease leaves no time for
// a send and its record; the claim was released and the delivery handed
// back, with no attempt spent.
var errNoTimeLeft = errors.New("claim took too long: no time left in its lease for a send")

// Handle applies one delivery and settles it.
func (w *Worker) Handle(ctx context.Context, d notify.Delivery) {
	msg := d.Message()
	ctx, span := w.tracer.Start(tracing.Extract(ctx, msg.Traceparent), "process "+msg.Type,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.message.id", strconv.FormatInt(msg.ID, 10)),
			attribute.Int("herald.retry_count", msg.RetryCount)))
	defer span.End()
	if msg.RetryCount == 0 && !msg.PublishedAt.IsZero() {
		tracing.Observe(ctx, w.metrics.brokerWait, max(time.Since(msg.PublishedAt), 0).Seconds())
	}
	channel := unknownChannel
	outcome, err := w.apply(ctx, d, msg, &channel, &ctx)
	span.SetAttributes(attribute.String("herald.channel", channel))
	if err != nil && ctx.Err() != nil {
		w.handedBack.Add(1)
	}
	switch {
	case err == nil:
	case errors.Is(err, errBusy), errors.Is(err, errDeferred), errors.Is(err, errHeld), errors.Is(err, errRateHeld), errors.Is(err, errDestHeld), errors.Is(err, errShare):
		// Expected while a claim runs, the server is down or the rate
		// limit is reached; the gate logs the outage once.
		w.metrics.parked.WithLabelValues(channel, parkReason(err)).Inc()
		span.SetAttributes(attribute.String("herald.outcome", "handed_back"), attribute.String("herald.reason", err.Error()))
		w.log.DebugContext(ctx, "delivery handed back", "message_id", msg.ID, "reason", err)
		return
	case ctx.Err() != nil && !errors.Is(err, errUnrecorded):
		// The handler's context ended: the process is stopping (its grace
		// for deliveries in flight is over) and the delivery is handed
		// back to the transport, no attempt spent (an admission wait or a
		// send cut short, an ack that could not go out). That is a
		// shutdown doing its job, not a failure: "worker stopped" counts
		// them. A send whose outcome could not be recorded stays an
		// ERROR: its redelivery repeats it.
		span.SetAttributes(attribute.String("herald.outcome", "handed_back"), attribute.String("herald.reason", "shutdown"))
		w.log.DebugContext(ctx, "delivery handed back: shutting down", "message_id", msg.ID, "retry_count", msg.RetryCount, "err", err)
		return
	default:
		span.SetStatus(codes.Error, "delivery not settled")
		span.RecordError(err)
		w.log.ErrorContext(ctx, "delivery not settled; it will come back", "message_id", msg.ID, "retry_count", msg.RetryCount, "err", err)
		return
	}
	span.SetAttributes(attribute.String("herald.outcome", string(outcome)))
	w.metrics.deliveries.WithLabelValues(channel, string(outcome)).Inc()
	w.log.DebugContext(ctx, "delivery settled", "message_id", msg.ID, "channel", channel, "outcome", outcome)
	if outcome == notify.OutcomeSent && !msg.OccurredAt.IsZero() {
		tracing.Observe(ctx, w.metrics.latency, time.Since(msg.OccurredAt).Seconds())
	}
}

// apply runs one delivery to its settlement, and sets *channel to the
// delivery's channel once it is known, and *logCtx to a context carrying
// the request id of the create that wrote the event (for the caller's log
// lines; apply's own carry it too). An error means the delivery was not
// settled (it was parked, or stays with the transport, and is
// redelivered).
//
// A delivery goes through five phases: admit (may it send now? if not, it
// is parked, holding nothing), claim (the message id and the notification,
// with a lease), send, classify (the outcome, a pure function of the send's
// answer) and settle (record the outcome, then acknowledge, retry, park or
// dead-letter the message).
func (w *Worker) apply(ctx context.Context, d notify.Delivery, msg notify.Message, channel *string, logCtx *context.Context) (notify.Outcome, error) {
	req, nid, err := msg.Decode()
	if err != nil {
		return w.undecodable(ctx, d, msg, err)
	}
	ctx = notify.WithRequestID(ctx, req.RequestID)
	*logCtx = notify.WithRequestID(*logCtx, req.RequestID)
	l, ok := w.lanes[req.Channel]
	if !ok {
		// The API refuses a channel it does not know; one it knows but this
		// worker has no sender for (a configuration that differs between
		// processes) fails the notification with the reason: herald dlq
		// redrive sends it again once the channel is configured.
		return w.deadLetter(ctx, d, msg, nid, notify.Permanent(fmt.Errorf("channel %q has no sender in this worker (it delivers on %s)",
			req.Channel, strings.Join(w.names, ", "))))
	}
	*channel = l.name
	out := notify.NewOutgoing(req)
	dest := l.destination(out) // read once: the URL is parsed for it
	if key := dest; w.book.isDisabled(key) {
		return w.deadLetter(ctx, d, msg, nid, notify.Permanent(fmt.Errorf(
			"destination %s is disabled: it failed for longer than HERALD_DESTINATION_DISABLE_AFTER (herald destinations list tells since when and why); enable it with herald destinations enable %s, then redrive",
			key, key)))
	}

	a, parked, err := w.admit(ctx, l, msg, dest)
	if err != nil {
		return "", w.release(ctx, d, 0, err)
	}
	if parked != nil {
		return "", w.release(ctx, d, parked.after, parked.why)
	}
	defer a.abandon() // a no-op once the send is reported

	c, err := w.claimPhase(ctx, msg, nid)
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
	deadline := time.Now().Add(l.timeout)
	cut := false // the lease, a limit of this worker's, bounds the send
	if byLease := c.Start.Add(w.cfg.Lease - storeTimeout - leaseMargin); byLease.Before(deadline) {
		deadline, cut = byLease, true
	}
	if !time.Now().Before(deadline) {
		res := notify.DeliveryResult{Claim: c.Claim, Outcome: notify.AttemptDeferred, Deferral: notify.DeferLimit, Error: errNoTimeLeft.Error()}
		if _, err := w.recordUntilCommitted(ctx, res); err != nil {
			return "", w.release(ctx, d, w.cfg.StoreBackoff, err)
		}
		return "", w.release(ctx, d, minPark, errNoTimeLeft)
	}
	sendErr, ownLimit := w.send(ctx, l, a, out, deadline, cut)
	if sendErr == nil {
		w.cfg.Crash("after-send")
	}

	facts := sendFacts{
		err: sendErr, retries: msg.RetryCount, maxRetries: w.cfg.MaxRetries,
		stopping: ctx.Err() != nil, ownLimit: ownLimit, outageSpends: w.cfg.OutageSpendsAttempts,
	}
	res := notify.DeliveryResult{Claim: c.Claim, Outcome: classify(facts)}
	if res.Outcome == notify.AttemptDeferred {
		res.Deferral = deferral(facts)
	}
	if sendErr != nil {
		res.Error = sendErr.Error()
	}
	if res.Outcome == notify.AttemptRetry {
		res.RetryIn = w.retryDelay(msg.RetryCount)
	}
	return w.settle(ctx, d, msg, nid, a, res, sendErr)
}

// claimPhase claims the message id and the notification for a send.
func (w *Worker) claimPhase(ctx context.Context, msg notify.Message, nid int64) (claim, error) {
	// The lease runs from the claim's transaction, which starts after this;
	// measured from here, the send's deadline is on the safe side.
	start := time.Now()
	_, span := w.tracer.Start(ctx, "claim")
	defer span.End()
	c, err := w.claim(msg, nid)
	if err != nil {
		span.SetStatus(codes.Error, "claim failed")
		return claim{}, err
	}
	span.SetAttributes(attribute.String("herald.claim", string(c.Status)))
	return claim{Claim: c, Start: start}, nil
}

// claim is a claim's answer and when it was asked for.
type claim struct {
	notify.Claim
	Start time.Time
}

// send runs the send under its deadline and gives the admission's places
// back as soon as it returns: the record of the outcome holds none. It
// reports whether the send ran out of the time this worker's own lease left
// it (cut), which says nothing about the message.
func (w *Worker) send(ctx context.Context, l *lane, a *admission, out notify.Outgoing, deadline time.Time, cut bool) (error, bool) {
	sctx, span := w.tracer.Start(ctx, "send "+l.name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("herald.channel", l.name), attribute.String("herald.notification_id", out.NotificationID)))
	sctx, cancel := context.WithDeadline(sctx, deadline)
	defer cancel()
	start := time.Now()
	err := l.sender.Send(sctx, out)
	took := time.Since(start)
	tracing.Observe(sctx, w.metrics.send.WithLabelValues(l.name), took.Seconds())
	if err != nil {
		span.SetStatus(codes.Error, "send failed")
		span.RecordError(err)
	}
	span.End()
	ownLimit := cut && err != nil && errors.Is(sctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	a.sent(err, ctx.Err() != nil || ownLimit, took)
	return err, ownLimit
}

// settle records res and settles the message by it: acknowledged when
// sent, parked until its provider's or destination's next turn when
// deferred, a retry copy scheduled, or dead-lettered.
func (w *Worker) settle(ctx context.Context, d notify.Delivery, msg notify.Message, nid int64, a *admission, res notify.DeliveryResult, sendErr error) (notify.Outcome, error) {
	rctx, span := w.tracer.Start(ctx, "record", trace.WithAttributes(attribute.String("herald.attempt", res.Outcome)))
	recorded, err := w.recordUntilCommitted(rctx, res)
	span.End()
	if err != nil {
		// The worker stopped and the store stayed unreachable through the
		// grace: the claim stays until its lease runs out; the redelivery
		// waits for it and then repeats the send (for a sent mail, the one
		// accepted duplicate, with the same Message-ID).
		return "", w.release(ctx, d, w.cfg.StoreBackoff, fmt.Errorf("%w: %w", errUnrecorded, err))
	}
	if !recorded {
		// The lease ran out during the send and another delivery took the
		// claim over (or settled the notification): its result stands, and
		// this copy is done.
		w.log.WarnContext(ctx, "claim lost during the send; the delivery that took it over decides", "message_id", msg.ID,
			"notification_id", nid, "outcome", res.Outcome)
		return w.ack(ctx, d, notify.OutcomeDuplicate)
	}
	switch res.Outcome {
	case notify.AttemptSent:
		w.cfg.Crash("after-commit")
		return w.ack(ctx, d, notify.OutcomeSent)
	case notify.AttemptDeferred:
		after := time.Duration(0) // stopping: back at once, to another worker
		if ctx.Err() == nil {
			after = a.wait()
		}
		return "", w.release(ctx, d, after, errDeferred)
	case notify.AttemptRetry:
		if err := w.retryUntilPublished(ctx, d, res.Error); err != nil {
			return "", w.release(ctx, d, 0, fmt.Errorf("schedule retry: %w", err))
		}
		w.log.WarnContext(ctx, "delivery failed; retry scheduled", "message_id", msg.ID, "notification_id", nid,
			"retry", msg.RetryCount+1, "err", res.Error)
		return notify.OutcomeRetried, nil
	default:
		return w.settleDead(ctx, d, msg, nid, sendErr)
	}
}

// channelError is err as the channel's gate sees it: a failure scoped to
// one destination is that delivery's own (it neither closes the channel's
// gate nor fails its trial).
func channelError(err error) error {
	if _, ok := notify.DestinationOf(err); ok {
		return errors.New(err.Error())
	}
	return err
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
				w.log.InfoContext(ctx, "outcome recorded after store failures", "message_id", res.Claim.MessageID,
					"outcome", res.Outcome, "failures", failures)
			}
			return recorded, nil
		}
		if failures == 0 {
			w.log.WarnContext(ctx, "outcome not recorded; retrying until it commits", "message_id", res.Claim.MessageID,
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

// retryUntilPublished schedules the retry copy of d, again and again with
// a growing pause while the transport fails (the broker down), until it
// is published or ctx ends. The store has recorded the retry already, and
// from then on refuses the original as a stale copy: handing the original
// back would leave the notification to the reconciler (its retry overdue
// by HERALD_RECONCILE_AFTER) rather than to its retry schedule. Only a
// stopping worker gives up and hands it back.
func (w *Worker) retryUntilPublished(ctx context.Context, d notify.Delivery, reason string) error {
	pause := max(w.cfg.StoreBackoff, 10*time.Millisecond)
	for failures := 0; ; failures++ {
		err := d.Retry(ctx, reason)
		if err == nil {
			if failures > 0 {
				w.log.InfoContext(ctx, "retry copy published after transport failures", "message_id", d.Message().ID, "failures", failures)
			}
			return nil
		}
		if failures == 0 {
			w.log.WarnContext(ctx, "retry copy not published; trying again until it is", "message_id", d.Message().ID, "err", err)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(2*pause, max(w.cfg.SenderBackoffMax, pause))
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
	w.log.ErrorContext(ctx, "delivery dead-lettered", "message_id", msg.ID, "notification_id", nid,
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

// release parks the delivery: it hands it back to the transport, due
// again after after, holding nothing meanwhile. A store outage, a busy
// claim or a closed gate so costs the delivery its wait, and nobody else a
// slot or a place.
func (w *Worker) release(ctx context.Context, d notify.Delivery, after time.Duration, cause error) error {
	if err := d.Release(context.WithoutCancel(ctx), after); err != nil {
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
