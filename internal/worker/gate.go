package worker

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldhq/herald/internal/notify"
)

// errHeld: the channel's gate is closed (its provider down or throttling);
// the delivery was parked until the gate's next turn, with no attempt
// spent.
var errHeld = errors.New("provider unavailable: delivery parked")

// gateState is where the gate stands.
type gateState int

const (
	// gateOpen: sends go.
	gateOpen gateState = iota
	// gateClosed: the provider is down or throttling; no send goes until
	// the backoff has passed, and then only one delivery, to probe or to
	// try.
	gateClosed
	// gateTrial: one real send (the trial) is under way; the others wait
	// for its answer.
	gateTrial
)

// The classes of outage, as logs and SenderStatus name them.
const (
	classDown      = "down"
	classThrottled = "throttled"
)

// turn is what the gate lets a delivery do.
type turn int

const (
	// turnWait: wait (until the backoff has passed, or the holder of the
	// turn reports).
	turnWait turn = iota
	// turnPass: send; the gate is open.
	turnPass
	// turnProbe: probe the provider (Prober.Probe), then report with
	// probeDone.
	turnProbe
	// turnTrial: send as the trial; report it (or abandon it when no send
	// goes out after all).
	turnTrial
)

// gateEvent is what a report did to the gate, for the log.
type gateEvent int

const (
	eventNone gateEvent = iota
	// eventClosed: the gate closed.
	eventClosed
	// eventReason: still closed, for another reason than the one logged.
	eventReason
	// eventOpened: the trial proved the provider takes mail again.
	eventOpened
)

// breaker is the gate as a pure state machine (the time is passed in), so
// that its schedule can be tested without waiting.
//
// A send failing with SenderDown or Throttled closes it. While closed, once
// the backoff has passed, one delivery gets the turn: for an outage
// (SenderDown) with a prober it probes first, and a failed probe grows the
// backoff; then one real send is the trial. Only the trial's answer opens
// the gate: a success, or a failure of the message itself (permanent or
// transient), which proves the provider takes mail. A trial failing like
// the first send closes it again with a grown backoff. The failures (and so
// the backoff) are forgotten only when a real send succeeds, so that a
// provider that answers probes but refuses mail, or throttles the first
// send after each pause, meets longer and longer pauses.
type breaker struct {
	base, ceiling time.Duration
	// downCloses is false when an outage spends the message's attempt
	// (Config.OutageSpendsAttempts): SenderDown is then the message's
	// failure, and only throttling closes the gate.
	downCloses bool
	// jitter picks the wait for a backoff of d; nil: full jitter on the
	// upper half.
	jitter func(d time.Duration) time.Duration

	state gateState
	// class and reason say why the gate is closed (the last failure seen).
	class, reason string
	since         time.Time // when it closed
	// failures counts the failed probes and tries since the last real
	// success: the exponent of the backoff.
	failures int
	// tries counts the probes and trials of this closure, for the log.
	tries int
	next  time.Time // no turn before this
	// busy: a probe or the trial is under way.
	busy bool
	// probed: the last probe passed; the next turn is the trial itself.
	probed bool
}

// take gives a delivery its turn at now, and when it must wait, for how
// long (zero: until the holder of the turn reports). canProbe says whether
// the sender can probe.
func (b *breaker) take(now time.Time, canProbe bool) (turn, time.Duration) {
	if b.state == gateOpen {
		return turnPass, 0
	}
	if b.busy {
		return turnWait, 0
	}
	if wait := b.next.Sub(now); wait > 0 {
		return turnWait, wait
	}
	b.busy = true
	if b.class == classDown && canProbe && !b.probed {
		return turnProbe, 0
	}
	b.state = gateTrial
	return turnTrial, 0
}

// probeDone takes the answer of the probe the caller's turn ran. A passing
// probe makes the caller the trial.
func (b *breaker) probeDone(now time.Time, err error) gateEvent {
	b.tries++
	if err == nil {
		b.probed = true
		b.state = gateTrial
		return eventNone
	}
	b.busy = false
	b.failures++
	b.next = now.Add(b.backoff(0))
	return b.note(classDown, err)
}

// report takes the answer of a send; trial says whether it was the trial.
func (b *breaker) report(now time.Time, trial bool, err error) gateEvent {
	class, after := b.classify(err)
	trial = trial && b.state == gateTrial
	switch {
	case class != "" && b.state == gateOpen:
		b.state, b.since, b.tries = gateClosed, now, 0
		b.failures++
		b.next = now.Add(b.backoff(after))
		b.class, b.reason = class, err.Error()
		return eventClosed
	case class != "" && trial:
		b.state, b.busy, b.probed = gateClosed, false, false
		b.tries++
		b.failures++
		b.next = now.Add(b.backoff(after))
		return b.note(class, err)
	case class != "":
		// A send that started before the gate closed (or a duplicate's):
		// it says why, but its failure is not one more try.
		if t := now.Add(after); after > 0 && t.After(b.next) {
			b.next = t
		}
		return b.note(class, err)
	case err == nil && b.state == gateOpen:
		b.failures = 0
	case trial:
		// Sent, or refused for the message's own sake: the provider takes
		// mail again. Only a sent mail forgets the failures.
		if err == nil {
			b.failures = 0
		}
		b.tries++
		b.state, b.busy, b.probed = gateOpen, false, false
		return eventOpened
	}
	// A success (or a message's failure) while closed may predate the
	// outage: it neither opens the gate nor forgets the failures.
	return eventNone
}

// abandon gives the turn back: its holder did not probe or send after all
// (it was stopped, its claim was busy or a duplicate, the store failed, its
// rate turn was too far). The next waiting delivery takes it at once.
func (b *breaker) abandon() {
	if !b.busy {
		return
	}
	b.busy = false
	if b.state == gateTrial {
		b.state = gateClosed
	}
}

// classify names the outage class of a send's error ("" when it is none)
// and the wait the provider asked for.
func (b *breaker) classify(err error) (class string, after time.Duration) {
	if after, ok := notify.IsThrottled(err); ok {
		return classThrottled, after
	}
	if b.downCloses && notify.IsSenderDown(err) {
		return classDown, 0
	}
	return "", 0
}

// note records why the gate stays closed, and reports whether that
// changed.
func (b *breaker) note(class string, err error) gateEvent {
	reason := err.Error()
	if class == b.class && sameReason(reason, b.reason) {
		return eventNone
	}
	b.class, b.reason = class, reason
	return eventReason
}

// sameReason reports whether two failures say the same thing, whether a
// send or a probe met it ("smtp send: dial ...: connection refused" and
// "smtp probe: dial ...: connection refused" are one reason), and whatever
// the numbers in it (a connection's ephemeral port, a duration).
func sameReason(a, b string) bool {
	return digits.ReplaceAllString(operationless(a), "#") == digits.ReplaceAllString(operationless(b), "#")
}

// digits matches the numbers sameReason ignores.
var digits = regexp.MustCompile(`[0-9]+`)

// operationless drops a leading "<sender> send: " or "<sender> probe: ".
func operationless(reason string) string {
	head, rest, ok := strings.Cut(reason, ": ")
	if ok && (strings.HasSuffix(head, " send") || strings.HasSuffix(head, " probe")) {
		return rest
	}
	return reason
}

// backoff is the wait before the next turn after failures failures: base
// doubling per failure up to the ceiling, with full jitter on its upper
// half so that workers that saw the outage together do not come back
// together; at least after, when the provider named a wait.
func (b *breaker) backoff(after time.Duration) time.Duration {
	d := b.step()
	if b.jitter != nil {
		d = b.jitter(d)
	} else {
		d = d/2 + rand.N(d/2+1)
	}
	return max(d, after)
}

// wait is how long a delivery that may not go now parks: until the next
// turn, or one backoff step while the turn is taken; zero when open.
func (b *breaker) wait(now time.Time) time.Duration {
	if b.state == gateOpen {
		return 0
	}
	if w := b.next.Sub(now); w > 0 && !b.busy {
		return w
	}
	return b.step()
}

// step is the backoff before the next turn without its jitter: how long a
// delivery that finds the turn taken parks (the trial under way fails, and
// the next turn comes after about that).
func (b *breaker) step() time.Duration {
	d := b.base
	for i := 1; i < b.failures && d < b.ceiling; i++ {
		d *= 2
	}
	return min(d, b.ceiling)
}

// gate stops new sends while the provider is down or throttling. It is
// driven by the deliveries themselves, with no goroutine of its own: the
// breaker decides, a delivery that may not send now is parked until the
// next turn, and the probe and the trial run in the deliveries that got
// the turns.
type gate struct {
	prober Prober // nil: no probe; the trial is the first check
	// provider names the channel's provider in logs and reasons ("mail
	// server").
	provider string
	timeout  time.Duration
	log      *slog.Logger
	up       prometheus.Gauge
	// book, when set, keeps the persisted record of the channel's
	// provider, under key (the channel's name).
	book *destBook
	key  string

	mu sync.Mutex
	b  breaker
}

func newGate(prober Prober, provider string, timeout time.Duration, cfg Config, up prometheus.Gauge) *gate {
	up.Set(1)
	return &gate{
		prober:   prober,
		provider: provider,
		timeout:  timeout,
		log:      cfg.Logger,
		up:       up,
		b: breaker{
			base:       cfg.SenderBackoff,
			ceiling:    cfg.SenderBackoffMax,
			downCloses: !cfg.OutageSpendsAttempts,
		},
	}
}

// admit gives the caller its turn without waiting: pass (trial false,
// after 0), the trial (trial true: the caller must report its send's
// error, or abandon), or park (after > 0: the caller holds nothing and
// comes back after it, when the gate's next turn may be free). The turn to
// probe runs the probe here (bounded by the send timeout); a passing probe
// leaves the trial to the next delivery to come, and the caller parks for
// a moment, so that a probe and a send never run in one delivery's lease.
func (g *gate) admit(ctx context.Context) (trial bool, after time.Duration, err error) {
	now := time.Now()
	g.mu.Lock()
	t, wait := g.b.take(now, g.prober != nil)
	if t == turnWait && wait <= 0 {
		wait = g.b.step() // the turn is taken: back when a failed trial would let the next one go
	}
	g.mu.Unlock()
	switch t {
	case turnPass:
		return false, 0, nil
	case turnTrial:
		return true, 0, nil
	case turnProbe:
		pctx, cancel := context.WithTimeout(ctx, g.timeout)
		perr := g.prober.Probe(pctx)
		cancel()
		if ctx.Err() != nil {
			g.abandon(true)
			return false, 0, ctx.Err()
		}
		if g.probed(perr) {
			// The probe passed: the trial is the next delivery's.
			g.abandon(true)
			return false, minPark, nil
		}
		g.mu.Lock()
		wait = time.Until(g.b.next)
		g.mu.Unlock()
	}
	return false, max(wait, minPark), nil
}

// wait is how long a delivery deferred by the provider parks: until the
// gate's next turn, or about one backoff step while the turn is taken;
// zero while the gate is open.
func (g *gate) wait(now time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.b.wait(now)
}

// probed takes the probe's answer and reports whether the caller is now
// the trial.
func (g *gate) probed(err error) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	ev := g.b.probeDone(time.Now(), err)
	g.after(ev)
	g.tell(ev, err != nil)
	return err == nil
}

// report tells the gate how a send ended; trial says whether it was the
// trial's.
func (g *gate) report(trial bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	before := g.b
	ev := g.b.report(time.Now(), trial, err)
	if ev != eventNone || g.b.state != before.state || g.b.busy != before.busy || !g.b.next.Equal(before.next) {
		g.after(ev)
	}
	class, _ := g.b.classify(err)
	g.tell(ev, class != "")
}

// tell writes the gate's news to the destination record: up once it
// opened, failing (with the reason) after each failure that keeps it
// closed, and up at this process's first send the provider took (a record
// another process left failing goes; see destBook.sent). g.mu is held;
// the book only queues.
func (g *gate) tell(ev gateEvent, failed bool) {
	switch {
	case ev == eventOpened:
		g.book.up(g.key)
	case failed && g.b.state != gateOpen:
		g.book.failing(g.key, g.key, g.provider+" "+g.b.class+": "+g.b.reason)
	case !failed && g.b.state == gateOpen:
		g.book.sent(g.key) // a record another process left failing goes
	}
}

// abandon gives the trial's (or the probe's) turn back when no send went
// out after all.
func (g *gate) abandon(trial bool) {
	if !trial {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.b.abandon()
	g.after(eventNone)
}

// after logs ev and sets herald_sender_up. g.mu is held.
func (g *gate) after(ev gateEvent) {
	b := &g.b
	switch ev {
	case eventClosed:
		g.log.Error(g.provider+" "+b.class+": sends paused; no attempt is spent meanwhile", "class", b.class, "reason", b.reason)
	case eventReason:
		g.log.Error(g.provider+" still "+b.class+", now for another reason", "class", b.class, "reason", b.reason,
			"down_for", time.Since(b.since).Round(time.Millisecond))
	case eventOpened:
		g.log.Info(g.provider+" back: sends resumed", "down_for", time.Since(b.since).Round(time.Millisecond), "tries", b.tries)
	}
	if b.state == gateOpen {
		g.up.Set(1)
	} else {
		g.up.Set(0)
	}
}

// status reports whether the gate is open, and when not, why.
// state is the gate's state for people: open, or closed with its class
// (down, throttled), its reason and the earliest next turn (a probe or the
// trial).
func (g *gate) state() ChannelState {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.b.state == gateOpen {
		return ChannelState{Up: true}
	}
	return ChannelState{Class: g.b.class, Reason: g.provider + " " + g.b.class + ": " + g.b.reason, Since: g.b.since, Next: g.b.next}
}

func (g *gate) status() (up bool, reason string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.b.state == gateOpen {
		return true, ""
	}
	return false, g.provider + " " + g.b.class + ": " + g.b.reason
}
