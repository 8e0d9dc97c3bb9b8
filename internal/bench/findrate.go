package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// The conditions under which a stack holds an arrival rate.
const (
	// keepUp is the share of the arrival rate the deliveries within the
	// window must reach.
	keepUp = 0.95
	// maxBacklog is the backlog allowed at the end of the window, in
	// seconds' worth of arrivals.
	maxBacklog = time.Second
	// maxE2EP99 bounds the 99th percentile of the end-to-end latency.
	maxE2EP99 = time.Second
)

// FindRateConfig tunes FindRate.
type FindRateConfig struct {
	// Start is the first arrival rate probed, per second. Default 100.
	Start float64
	// Window is how long each probe sends at its rate. Default 60s.
	Window time.Duration
	// Budget bounds the whole search: a probe starts only when its window
	// fits in what is left, and a probe still draining when the budget
	// runs out is abandoned; the search then reports the bracket it has.
	// Default 20m.
	Budget time.Duration
	// Precision ends the search once the lowest failing rate is at most
	// this fraction above the highest holding one. Default 0.10.
	Precision float64
	// MinRate ends the search, holding nothing, when even this rate fails.
	// Default 1/s.
	MinRate float64
}

func (c FindRateConfig) withDefaults() FindRateConfig {
	if c.Start == 0 {
		c.Start = 100
	}
	if c.Window == 0 {
		c.Window = time.Minute
	}
	if c.Budget == 0 {
		c.Budget = 20 * time.Minute
	}
	if c.Precision == 0 {
		c.Precision = 0.10
	}
	if c.MinRate == 0 {
		c.MinRate = 1
	}
	return c
}

func (c FindRateConfig) validate() error {
	switch {
	case c.Start <= 0 || c.MinRate <= 0 || c.Start < c.MinRate:
		return fmt.Errorf("find rate: start (%g/s) and min rate (%g/s) must be positive, start at least min", c.Start, c.MinRate)
	case c.Window <= 0 || c.Budget <= 0:
		return fmt.Errorf("find rate: window and budget must be positive, got %s and %s", c.Window, c.Budget)
	case c.Precision <= 0:
		return fmt.Errorf("find rate: precision must be positive, got %g", c.Precision)
	}
	return nil
}

// Probe is one run at a fixed arrival rate and the verdict on it.
type Probe struct {
	// Rate is the arrival rate, per second.
	Rate    float64 `json:"rate_per_s"`
	WindowS float64 `json:"window_s"`
	// Accepted and Rejected count the creates of the probe.
	Accepted int `json:"accepted"`
	Rejected int `json:"rejected"`
	// DeliveredPerSec is the emails delivered within the window, per
	// second of it; Backlog the notifications accepted and not yet
	// delivered at its end.
	DeliveredPerSec float64 `json:"delivered_in_window_per_s"`
	Backlog         int     `json:"backlog_at_window_end"`
	E2EP99ms        float64 `json:"e2e_p99_ms"`
	// Holds says whether the stack held the rate; Why, when not, says
	// which conditions failed.
	Holds bool   `json:"holds"`
	Why   string `json:"why,omitempty"`
	// TookS is the probe's whole time, the drain of its backlog included.
	TookS float64 `json:"took_s"`
}

// Judge decides whether res, a Run at rate, held it: no create rejected,
// delivered within the window at least 0.95x the rate, a backlog at the
// window's end of at most one second of arrivals, and an end-to-end p99
// under one second.
func Judge(rate float64, res Result) Probe {
	p := Probe{
		Rate:     rate,
		WindowS:  round(res.Window.Seconds(), 3),
		Accepted: res.Accepted,
		Backlog:  res.AcceptedInWindow - res.DeliveredInWindow,
		E2EP99ms: ms(res.E2EP99),
	}
	for _, n := range res.Rejected {
		p.Rejected += n
	}
	delivered := PerSecond(res.DeliveredInWindow, res.Window)
	p.DeliveredPerSec = round(delivered, 1)
	var why []string
	if p.Rejected > 0 {
		why = append(why, fmt.Sprintf("%d creates rejected", p.Rejected))
	}
	if delivered < keepUp*rate {
		why = append(why, fmt.Sprintf("delivered %.1f/s < %.2fx the rate", delivered, keepUp))
	}
	if float64(p.Backlog) > rate*maxBacklog.Seconds() {
		why = append(why, fmt.Sprintf("backlog %d > %s of arrivals", p.Backlog, maxBacklog))
	}
	if res.E2EP99 >= maxE2EP99 {
		why = append(why, fmt.Sprintf("e2e p99 %s >= %s", res.E2EP99.Round(time.Millisecond), maxE2EP99))
	}
	p.Holds = len(why) == 0
	p.Why = strings.Join(why, "; ")
	return p
}

// String is the probe as one line for people.
func (p Probe) String() string {
	verdict := "holds"
	if !p.Holds {
		verdict = "fails: " + p.Why
	}
	return fmt.Sprintf("%.1f/s for %gs: accepted %d, delivered %.1f/s in the window, backlog %d at its end, e2e p99 %.0f ms (%.1fs): %s",
		p.Rate, p.WindowS, p.Accepted, p.DeliveredPerSec, p.Backlog, p.E2EP99ms, p.TookS, verdict)
}

// RateSearch is the outcome of FindRate; its JSON is what
// `herald bench --find-rate --json` prints.
type RateSearch struct {
	Store       string  `json:"store"`
	Transport   string  `json:"transport"`
	Channel     string  `json:"channel"`
	Concurrency int     `json:"concurrency"`
	WindowS     float64 `json:"window_s"`
	// SustainableRate is the highest rate a probe held; 0 when none did.
	SustainableRate float64 `json:"sustainable_rate_per_s"`
	// LowestFailing is the lowest rate a probe failed; 0 when none did.
	LowestFailing float64 `json:"lowest_failing_rate_per_s"`
	// Complete says whether the two are within the precision (or the
	// search went below its minimum rate); false when the budget ran out
	// first.
	Complete bool     `json:"complete"`
	Probes   []Probe  `json:"probes"`
	Notes    []string `json:"notes,omitempty"`
}

// FindRate searches for the highest arrival rate the stack holds (see
// Judge): it probes cfg.Start, doubles the rate while probes hold (or
// halves it while they fail) until it has a rate that holds below one that
// fails, then bisects until they are within cfg.Precision. probe runs one
// probe; onProbe, when set, is told of each as it ends. A probe's error
// ends the search with it, but for the budget running out, which ends it
// with what it found.
func FindRate(ctx context.Context, cfg FindRateConfig, probe func(ctx context.Context, rate float64) (Probe, error), onProbe func(Probe)) (RateSearch, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return RateSearch{}, err
	}
	s := RateSearch{WindowS: round(cfg.Window.Seconds(), 3)}
	deadline := time.Now().Add(cfg.Budget)
	bctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for {
		rate, done := nextRate(s.SustainableRate, s.LowestFailing, cfg)
		if done {
			s.Complete = true
			return s, nil
		}
		if time.Until(deadline) < cfg.Window {
			s.Notes = append(s.Notes, fmt.Sprintf("the budget (%s) ran out before the probe at %.1f/s", cfg.Budget, rate))
			return s, nil
		}
		started := time.Now()
		p, err := probe(bctx, rate)
		if err != nil {
			if ctx.Err() == nil && errors.Is(bctx.Err(), context.DeadlineExceeded) {
				s.Notes = append(s.Notes, fmt.Sprintf("the budget (%s) ran out during the probe at %.1f/s", cfg.Budget, rate))
				return s, nil
			}
			return s, fmt.Errorf("find rate: probe at %.1f/s: %w", rate, err)
		}
		p.TookS = round(time.Since(started).Seconds(), 1)
		s.Probes = append(s.Probes, p)
		if onProbe != nil {
			onProbe(p)
		}
		if p.Holds {
			s.SustainableRate = max(s.SustainableRate, rate)
		} else if s.LowestFailing == 0 || rate < s.LowestFailing {
			s.LowestFailing = rate
		}
	}
}

// nextRate returns the next rate to probe given the highest rate that held
// (lo, 0 for none) and the lowest that failed (hi, 0 for none), or done.
func nextRate(lo, hi float64, cfg FindRateConfig) (rate float64, done bool) {
	switch {
	case lo == 0 && hi == 0:
		return cfg.Start, false
	case hi == 0:
		return 2 * lo, false
	case lo == 0:
		rate = roundRate(hi / 2)
		return rate, rate < cfg.MinRate
	case hi <= lo*(1+cfg.Precision):
		return 0, true
	}
	rate = roundRate((lo + hi) / 2)
	// Rounding may land on a bound already probed: the bracket is then
	// as narrow as the rounding lets it be.
	return rate, rate <= lo || rate >= hi
}

// roundRate rounds a rate to a whole number per second, or to 0.1/s below
// ten.
func roundRate(r float64) float64 {
	if r >= 10 {
		return math.Round(r)
	}
	return math.Round(r*10) / 10
}

// WriteJSON writes the search as one JSON object on one line.
func (s RateSearch) WriteJSON(w io.Writer) error { return writeJSONLine(w, "rate search", s) }

// WriteText writes the search for people: each probe, then the result.
func (s RateSearch) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "herald bench --find-rate: %s + %s, channel %s, %d clients, %gs windows\n\n", s.Store, s.Transport, s.Channel, s.Concurrency, s.WindowS)
	for i, p := range s.Probes {
		fmt.Fprintf(&b, "  probe %d: %s\n", i+1, p)
	}
	b.WriteString("\n")
	switch {
	case s.SustainableRate == 0:
		fmt.Fprintf(&b, "  sustainable rate: none held (lowest failing %.1f/s)\n", s.LowestFailing)
	case s.LowestFailing == 0:
		fmt.Fprintf(&b, "  sustainable rate: at least %.1f/s (no probe failed)\n", s.SustainableRate)
	default:
		fmt.Fprintf(&b, "  sustainable rate: %.1f/s (%.1f/s failed)\n", s.SustainableRate, s.LowestFailing)
	}
	if !s.Complete {
		b.WriteString("  the search did not finish: see the notes\n")
	}
	for _, n := range s.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	return writeText(w, "rate search", b.String())
}
