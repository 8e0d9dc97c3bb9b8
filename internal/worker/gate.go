package worker

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldhq/herald/internal/notify"
)

// errHeld: a delivery waited at the closed gate for as long as one may; it
// is handed back (and comes back to wait again) so that no transport sees
// it unsettled for the whole outage.
var errHeld = errors.New("mail server down: delivery handed back")

// gate stops new sends while the mail server is down. It is driven by the
// deliveries themselves, with no goroutine of its own: a send failing with
// notify.SenderDown closes it; deliveries arriving meanwhile wait in enter;
// once the backoff has passed, one of them probes the server (Prober.Probe,
// or with no prober its own send is the probe) and the gate opens when the
// server answers.
type gate struct {
	prober  Prober // nil: a real send probes
	timeout time.Duration
	base    time.Duration
	ceiling time.Duration
	hold    time.Duration
	log     *slog.Logger
	up      prometheus.Gauge

	mu       sync.Mutex
	down     bool
	since    time.Time
	failures int       // failed probes in this outage, plus the first failure
	next     time.Time // no probe before this
	probing  bool      // a probe (or the probing send) is under way
	changed  chan struct{}
}

func newGate(prober Prober, cfg Config, up prometheus.Gauge) *gate {
	up.Set(1)
	return &gate{
		prober:  prober,
		timeout: cfg.SendTimeout,
		base:    cfg.SenderBackoff,
		ceiling: cfg.SenderBackoffMax,
		hold:    cfg.SenderBackoffMax,
		log:     cfg.Logger,
		up:      up,
		changed: make(chan struct{}),
	}
}

// enter waits until sends may go. probe is true when the caller's send is
// the probe: it must then call report with the send's error, or abandon if
// it does not send after all.
func (g *gate) enter(ctx context.Context) (probe bool, err error) {
	held := time.NewTimer(g.hold)
	defer held.Stop()
	for {
		g.mu.Lock()
		if !g.down {
			g.mu.Unlock()
			return false, nil
		}
		wait := time.Until(g.next)
		if !g.probing && wait <= 0 {
			g.probing = true
			g.mu.Unlock()
			if g.prober == nil {
				return true, nil
			}
			pctx, cancel := context.WithTimeout(ctx, g.timeout)
			err := g.prober.Probe(pctx)
			cancel()
			if ctx.Err() != nil {
				g.abandon(true)
				return false, ctx.Err()
			}
			g.report(true, notify.SenderDown(err))
			continue
		}
		changed := g.changed
		g.mu.Unlock()
		if wait <= 0 {
			wait = g.hold // a probe is under way: its report wakes us
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-held.C:
			t.Stop()
			return false, errHeld
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// report tells the gate how a send (or the probe) ended. A SenderDown error
// closes the gate, or, from the probe, doubles the backoff; any other
// outcome of the probe (delivered, or refused by a server that answered)
// opens it. Other sends' successes do not open it: they may have been under
// way before the server went down.
func (g *gate) report(probe bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case notify.IsSenderDown(err):
		if !g.down {
			g.down, g.since, g.failures = true, time.Now(), 0
			g.up.Set(0)
			g.log.Error("mail server down: sends paused; no attempt is spent while it is down", "reason", err)
		}
		if probe || g.failures == 0 {
			g.failures++
			g.next = time.Now().Add(g.backoff())
		}
		if probe {
			g.probing = false
		}
	case probe && g.down:
		g.log.Info("mail server back: sends resumed", "down_for", time.Since(g.since).Round(time.Millisecond), "probes", g.failures)
		g.down, g.probing, g.failures = false, false, 0
		g.up.Set(1)
	default:
		return
	}
	close(g.changed)
	g.changed = make(chan struct{})
}

// abandon gives the probe back to the next waiting delivery (the probing
// delivery did not send after all: a duplicate, a busy claim, a store
// failure).
func (g *gate) abandon(probe bool) {
	if !probe {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.probing = false
	close(g.changed)
	g.changed = make(chan struct{})
}

// backoff is the wait before the next probe: base doubling per failure up
// to the ceiling, with full jitter on its upper half so that workers that
// saw the outage together do not probe together.
func (g *gate) backoff() time.Duration {
	d := g.base
	for i := 1; i < g.failures && d < g.ceiling; i++ {
		d *= 2
	}
	d = min(d, g.ceiling)
	return d/2 + rand.N(d/2+1)
}
