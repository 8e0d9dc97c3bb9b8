package worker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/heraldhq/herald/internal/notify"
)

// minPark is the shortest park: a delivery that cannot go now comes back
// no sooner, so that nothing is handed back in a loop.
const minPark = 50 * time.Millisecond

// maxTickets bounds the rate turns a lane keeps for parked deliveries.
const maxTickets = 16384

// errRateHeld: the delivery's turn under the channel's rate limit was
// further away than a delivery waits in place; it was parked until its
// turn, with no attempt spent.
var errRateHeld = errors.New("rate limit: delivery parked until its turn")

// errShare: the channel's or the destination's sends are all taken and as
// many deliveries as may wait for them already wait; the delivery was
// parked, with no attempt spent.
var errShare = errors.New("channel or destination at its share of sends: delivery parked")

// parking is why a delivery cannot go now and when it may.
type parking struct {
	after time.Duration
	why   error
}

// pool is a limit on sends under way (a channel's Concurrency, one
// destination's share): at most cap of them send at once, and at most
// holdPerSend x cap deliveries wait for or hold a place. Beyond that a
// delivery is parked, so that deliveries the limit holds up never fill a
// transport's window that others need.
type pool struct {
	key     string // the destination; "" for a channel's Concurrency
	cap     int
	sending int
	held    int
	free    chan struct{} // closed and replaced when a place frees
}

func newPool(key string, n int) *pool { return &pool{key: key, cap: n, free: make(chan struct{})} }

// lane is one channel as the worker runs it: its sender, gates and limits.
type lane struct {
	name    string
	sender  Sender
	dests   Destinations // nil: the channel's gate is the only one
	timeout time.Duration
	gate    *gate
	dgates  *destGates    // nil without dests
	limiter *rate.Limiter // nil without a Rate
	// destSends is the most sends to one destination at once (0: no
	// share of its own).
	destSends int
	// sendTime is an average of the channel's send times, in nanoseconds:
	// how long a parked delivery waits for a place.
	sendTime atomic.Int64

	mu      sync.Mutex
	slots   *pool            // nil without a Concurrency
	shares  map[string]*pool // destination -> its share; present while held
	tickets map[int64]time.Time
}

// admission is what a delivery holds once admitted: its turns at the gates
// (reported or abandoned once) and its places in the limits (given back
// once its send returns).
type admission struct {
	w         *Worker
	l         *lane
	trial     bool
	dest      string
	destTrial bool
	holds     []*pool // waiting for a place
	places    []*pool // holding a place
	sendSlot  bool
	reported  bool
}

// admit decides whether a delivery may send now, holding nothing while it
// decides but for a short wait for a turn or a place: Config.Patience in
// all, however many of them it waits for. It
// checks, in order: the channel's gate, the destination's gate, the
// destination's share, the rate turn, the channel's concurrency and the
// worker's send slot. What cannot go now is parked with the time it may:
// the gate's next turn, its rate turn, or about a send's time for a place.
func (w *Worker) admit(ctx context.Context, l *lane, msg notify.Message, dest string) (*admission, *parking, error) {
	a := &admission{w: w, l: l}
	until := time.Now().Add(w.cfg.Patience)
	park := func(p *parking) (*admission, *parking, error) {
		a.abandon()
		return nil, p, nil
	}
	trial, after, err := l.gate.admit(ctx)
	if err != nil {
		return nil, nil, err
	}
	if after > 0 {
		return nil, &parking{after, errHeld}, nil
	}
	a.trial = trial
	if l.dests != nil {
		a.dest = dest
		trial, ok, after := l.dgates.enter(a.dest, time.Now())
		if !ok {
			return park(&parking{after, errDestHeld})
		}
		a.destTrial = trial
		if l.destSends > 0 {
			p, parked := l.hold(a.dest)
			if parked != nil {
				return park(parked)
			}
			a.holds = append(a.holds, p)
		}
	}
	if parked, err := l.turn(ctx, msg.ID, until); err != nil || parked != nil {
		a.abandon()
		return nil, parked, err
	}
	if l.slots != nil {
		p, parked := l.hold("")
		if parked != nil {
			return park(parked)
		}
		a.holds = append(a.holds, p)
	}
	for len(a.holds) > 0 {
		p := a.holds[0]
		if !l.take(ctx, p, until) {
			if ctx.Err() != nil {
				a.abandon()
				return nil, nil, ctx.Err()
			}
			return park(&parking{l.placeWait(), errShare})
		}
		a.holds = a.holds[1:]
		a.places = append(a.places, p)
	}
	if !w.takeSend(ctx, msg.Priority.Rank(), until) {
		if ctx.Err() != nil {
			a.abandon()
			return nil, nil, ctx.Err()
		}
		return park(&parking{l.placeWait(), errShare})
	}
	a.sendSlot = w.sends != nil
	return a, nil, nil
}

// sent gives back the places of a delivery whose send returned, and
// reports its answer to the gates, unless a limit of this worker's cut the
// send short (it is stopping, or the lease left the send less than its
// timeout): such a failure says nothing about the provider. A failure scoped to one
// destination says nothing about the channel's provider: to the channel's
// gate it is the message's.
func (a *admission) sent(err error, cutShort bool, took time.Duration) {
	a.free()
	if a.reported {
		return
	}
	a.reported = true
	if cutShort && err != nil {
		a.l.gate.abandon(a.trial)
		if a.l.dgates != nil {
			a.l.dgates.abandon(a.dest, a.destTrial)
		}
		return
	}
	a.l.gate.report(a.trial, channelError(err))
	if a.l.dgates != nil {
		a.l.dgates.report(a.dest, a.destTrial, err, time.Now())
	}
	a.l.observe(took)
}

// abandon gives everything back when no send went out after all.
func (a *admission) abandon() {
	a.free()
	if a.reported {
		return
	}
	a.reported = true
	a.l.gate.abandon(a.trial)
	if a.l.dgates != nil && a.dest != "" {
		a.l.dgates.abandon(a.dest, a.destTrial)
	}
}

// free gives the holds, the places and the send slot back, once.
func (a *admission) free() {
	for _, p := range a.holds {
		a.l.unhold(p)
	}
	for _, p := range a.places {
		a.l.release(p)
	}
	a.holds, a.places = nil, nil
	if a.sendSlot {
		a.w.sends.release()
		a.sendSlot = false
	}
}

// wait is how long a delivery the provider or its destination deferred
// parks: until the later of the two gates' next turns.
func (a *admission) wait() time.Duration {
	now := time.Now()
	d := a.l.gate.wait(now)
	if a.l.dgates != nil && a.dest != "" {
		d = max(d, a.l.dgates.wait(a.dest, now))
	}
	return max(d, minPark)
}

// destination is the key of out's destination: its endpoint for a channel
// with Destinations, the channel's name for a channel with one provider.
func (l *lane) destination(out notify.Outgoing) string {
	if l.dests != nil {
		return l.dests.Destination(out)
	}
	return l.name
}

// hold counts a delivery waiting for a place of dest's share (dest "": of
// the channel's Concurrency), or parks it when as many as may wait do.
func (l *lane) hold(dest string) (*pool, *parking) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.slots
	if dest != "" {
		p = l.shares[dest]
		if p == nil {
			p = newPool(dest, l.destSends)
			l.shares[dest] = p
		}
	}
	if p.held >= holdPerSend*p.cap {
		// Back when the ones ahead of it have about sent.
		return nil, &parking{max(minPark, min(l.avgSend()*time.Duration(p.held/p.cap), 60*time.Second)), errShare}
	}
	p.held++
	return p, nil
}

// take waits until until at most for a place in p.
func (l *lane) take(ctx context.Context, p *pool, until time.Time) bool {
	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	for {
		l.mu.Lock()
		if p.sending < p.cap {
			p.sending++
			l.mu.Unlock()
			return true
		}
		free := p.free
		l.mu.Unlock()
		select {
		case <-free:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// release gives back a place taken in p, and p's hold.
func (l *lane) release(p *pool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p.sending--
	l.unholdLocked(p)
	close(p.free)
	p.free = make(chan struct{})
}

// unhold gives back a hold on p that took no place.
func (l *lane) unhold(p *pool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unholdLocked(p)
}

func (l *lane) unholdLocked(p *pool) {
	p.held--
	if p.held == 0 && p.key != "" && p.sending == 0 {
		delete(l.shares, p.key)
	}
}

// placeWait is how long a delivery that found no place in p parks.
func (l *lane) placeWait() time.Duration {
	return max(minPark, min(l.avgSend(), 10*time.Second))
}

// observe folds one send's time into the channel's average.
func (l *lane) observe(took time.Duration) {
	old := l.sendTime.Load()
	if old == 0 {
		l.sendTime.Store(int64(took))
		return
	}
	l.sendTime.Store(old + (int64(took)-old)/8)
}

func (l *lane) avgSend() time.Duration { return time.Duration(l.sendTime.Load()) }

// turn gives the delivery its turn under the channel's rate: a turn by
// until is waited for; a further one is kept for the message (a ticket)
// and the delivery parked until then, so that parked deliveries come back
// one turn apart, each to its own turn.
func (l *lane) turn(ctx context.Context, id int64, until time.Time) (*parking, error) {
	if l.limiter == nil {
		return nil, nil
	}
	now := time.Now()
	l.mu.Lock()
	at, ok := l.tickets[id]
	if ok {
		delete(l.tickets, id)
	} else {
		r := l.limiter.ReserveN(now, 1)
		at = now.Add(r.DelayFrom(now))
	}
	wait := at.Sub(now)
	if at.After(until) {
		if len(l.tickets) >= maxTickets {
			for k, t := range l.tickets {
				if t.Before(now) {
					delete(l.tickets, k)
				}
			}
		}
		if len(l.tickets) < maxTickets {
			l.tickets[id] = at
		}
		l.mu.Unlock()
		return &parking{wait, errRateHeld}, nil
	}
	l.mu.Unlock()
	if wait <= 0 {
		return nil, nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// takeSend waits until until at most for one of the worker's send slots,
// in the turn of its priority's rank (sendSlots).
func (w *Worker) takeSend(ctx context.Context, rank int, until time.Time) bool {
	if w.sends == nil {
		return true
	}
	return w.sends.take(ctx, rank, until)
}
