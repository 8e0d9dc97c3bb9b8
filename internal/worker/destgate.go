package worker

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// maxDestGates bounds the destination gates of one channel. Only closed
// gates are kept (a gate that opens is dropped), so the map holds the
// destinations failing at once; past the bound a newly failing destination
// gets no gate of its own: its deliveries are still deferred with no
// attempt spent, each one trying the destination.
const maxDestGates = 4096

// destGates keeps a gate per destination of a channel (a webhook endpoint)
// for the failures its sender scoped to one destination with
// notify.ForDestination: one endpoint down or throttling pauses only the
// deliveries to it. Unlike the channel's gate, nobody waits at a closed
// destination gate: a delivery to it is handed back at once (after a short
// pause), so that it does not hold a slot that deliveries to other
// destinations need.
type destGates struct {
	provider string
	cfg      Config
	log      *slog.Logger

	mu    sync.Mutex
	gates map[string]*breaker
}

func newDestGates(provider string, cfg Config) *destGates {
	return &destGates{provider: provider, cfg: cfg, log: cfg.Logger, gates: make(map[string]*breaker)}
}

// enter gives a delivery to key its turn: pass (no gate, or open), the
// trial (report it, or abandon it), or wait (ok false) with the pause
// before it is handed back.
func (d *destGates) enter(key string, now time.Time) (trial, ok bool, pause time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b := d.gates[key]
	if b == nil {
		return false, true, 0
	}
	switch t, wait := b.take(now, false); t {
	case turnPass:
		return false, true, 0
	case turnTrial:
		return true, true, 0
	default:
		// Hand back soon: at the next turn, but at most the first backoff,
		// so that a slot is not held long; at least a little, so that the
		// delivery does not come straight back.
		if wait <= 0 {
			wait = d.cfg.SenderBackoff
		}
		return false, false, max(min(wait, d.cfg.SenderBackoff), 10*time.Millisecond)
	}
}

// report takes the answer of a send to key (trial: it was key's trial).
// An error scoped to a destination closes (or keeps closed) that
// destination's gate; a success or a message's own failure opens key's.
func (d *destGates) report(key string, trial bool, err error, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if scoped, ok := notify.DestinationOf(err); ok {
		b := d.gates[scoped]
		if b == nil {
			if len(d.gates) >= maxDestGates {
				d.log.Warn(d.provider+" destination failing; too many failing destinations to pause it alone", "destination", scoped, "reason", err.Error())
				return
			}
			b = &breaker{base: d.cfg.SenderBackoff, ceiling: d.cfg.SenderBackoffMax, downCloses: !d.cfg.OutageSpendsAttempts}
			d.gates[scoped] = b
		}
		ev := b.report(now, trial && scoped == key, err)
		d.logEvent(scoped, b, ev)
		if b.state == gateOpen {
			delete(d.gates, scoped) // not an outage after all (OutageSpendsAttempts)
		}
		if scoped == key || !trial {
			return
		}
		// The trial of key met another destination's failure (a redirect,
		// say): it says nothing about key.
		if kb := d.gates[key]; kb != nil {
			kb.abandon()
		}
		return
	}
	b := d.gates[key]
	if b == nil {
		return
	}
	if err != nil {
		if _, throttled := notify.IsThrottled(err); throttled || notify.IsSenderDown(err) {
			// The whole channel failed: nothing learnt about key.
			if trial {
				b.abandon()
			}
			return
		}
	}
	ev := b.report(now, trial, err)
	d.logEvent(key, b, ev)
	if b.state == gateOpen {
		delete(d.gates, key)
	}
}

// abandon gives key's trial back when no send went out after all.
func (d *destGates) abandon(key string, trial bool) {
	if !trial {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if b := d.gates[key]; b != nil {
		b.abandon()
	}
}

// closed reports how many destinations are paused.
func (d *destGates) closed() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.gates)
}

func (d *destGates) logEvent(key string, b *breaker, ev gateEvent) {
	switch ev {
	case eventClosed:
		d.log.Error(d.provider+" destination "+b.class+": its sends paused; no attempt is spent meanwhile",
			"destination", key, "class", b.class, "reason", b.reason)
	case eventReason:
		d.log.Error(d.provider+" destination still "+b.class+", now for another reason",
			"destination", key, "class", b.class, "reason", b.reason)
	case eventOpened:
		d.log.Info(d.provider+" destination back: its sends resumed", "destination", key,
			"down_for", time.Since(b.since).Round(time.Millisecond), "tries", b.tries)
	}
}

// errDestHeld: the delivery's destination is down or throttling; it was
// handed back with no attempt spent, and other destinations go on.
var errDestHeld = errors.New("destination unavailable: delivery handed back, no attempt spent")
