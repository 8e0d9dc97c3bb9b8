package worker

import (
	"container/list"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// maxDestGates bounds the destination gates of one channel, so that no
// client can grow the worker's memory by naming failing destinations. Only
// closed gates are kept (a gate that opens is dropped); past the bound the
// gate touched least recently is dropped for the new one. A destination
// whose gate was dropped is tried again by its next delivery, which
// closes a new gate if it still fails: each try is followed by a park of
// at least SenderBackoff, so no destination is tried in a loop.
const maxDestGates = 16384

// destGates keeps a gate per destination of a channel (a webhook endpoint)
// for the failures its sender scoped to one destination with
// notify.ForDestination: one endpoint down or throttling pauses only the
// deliveries to it. A delivery to a closed gate is parked until the gate's
// next turn, holding nothing that deliveries to other destinations need.
type destGates struct {
	provider string
	cfg      Config
	log      *slog.Logger
	max      int
	// channel names the channel in the destination record; book, when
	// set, keeps it.
	channel string
	book    *destBook

	mu    sync.Mutex
	gates map[string]*list.Element // of *destGate
	lru   list.List                // front: touched most recently
}

// destGate is one destination's breaker.
type destGate struct {
	key string
	b   breaker
}

func newDestGates(provider string, cfg Config) *destGates {
	return &destGates{provider: provider, cfg: cfg, log: cfg.Logger, max: maxDestGates, gates: make(map[string]*list.Element)}
}

// get returns key's gate (touching it), nil when it has none.
func (d *destGates) get(key string) *breaker {
	e := d.gates[key]
	if e == nil {
		return nil
	}
	d.lru.MoveToFront(e)
	return &e.Value.(*destGate).b
}

// add returns a new closed-to-be gate for key, dropping the gate touched
// least recently when the bound is reached.
func (d *destGates) add(key string) *breaker {
	if len(d.gates) >= d.max {
		old := d.lru.Back()
		d.lru.Remove(old)
		delete(d.gates, old.Value.(*destGate).key)
	}
	g := &destGate{key: key, b: breaker{base: d.cfg.SenderBackoff, ceiling: d.cfg.SenderBackoffMax, downCloses: !d.cfg.OutageSpendsAttempts}}
	d.gates[key] = d.lru.PushFront(g)
	return &g.b
}

func (d *destGates) drop(key string) {
	if e := d.gates[key]; e != nil {
		d.lru.Remove(e)
		delete(d.gates, key)
	}
}

// enter gives a delivery to key its turn: pass (no gate, or open), the
// trial (report it, or abandon it), or park (ok false) for after, until
// the gate's next turn.
func (d *destGates) enter(key string, now time.Time) (trial, ok bool, after time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b := d.get(key)
	if b == nil {
		return false, true, 0
	}
	switch t, _ := b.take(now, false); t {
	case turnPass:
		return false, true, 0
	case turnTrial:
		return true, true, 0
	default:
		return false, false, max(b.wait(now), minPark)
	}
}

// wait is how long a delivery to key deferred by the destination parks.
func (d *destGates) wait(key string, now time.Time) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if b := d.get(key); b != nil {
		return b.wait(now)
	}
	return 0
}

// report takes the answer of a send to key (trial: it was key's trial).
// An error scoped to a destination closes (or keeps closed) that
// destination's gate; a success or a message's own failure opens key's.
func (d *destGates) report(key string, trial bool, err error, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if scoped, ok := notify.DestinationOf(err); ok {
		b := d.get(scoped)
		if b == nil {
			b = d.add(scoped)
		}
		ev := b.report(now, trial && scoped == key, err)
		d.logEvent(scoped, b, ev)
		if class, _ := b.classify(err); class != "" && b.state != gateOpen {
			d.book.failing(d.channel, scoped, d.provider+" "+b.class+": "+b.reason)
		}
		if b.state == gateOpen {
			d.drop(scoped) // not an outage after all (OutageSpendsAttempts)
		}
		if scoped == key || !trial {
			return
		}
		// The trial of key met another destination's failure (a redirect,
		// say): it says nothing about key.
		if kb := d.get(key); kb != nil {
			kb.abandon()
		}
		return
	}
	b := d.get(key)
	if b == nil {
		if err == nil {
			d.book.sent(key) // a record another process left failing goes
		}
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
	if ev == eventOpened {
		d.book.up(key)
	}
	if b.state == gateOpen {
		d.drop(key)
	}
}

// abandon gives key's trial back when no send went out after all.
func (d *destGates) abandon(key string, trial bool) {
	if !trial {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if b := d.get(key); b != nil {
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
// parked until the destination's next turn with no attempt spent, and
// other destinations go on.
var errDestHeld = errors.New("destination unavailable: delivery parked, no attempt spent")
