package main

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// termLimit is the longest a herald process may take from SIGTERM to its
// exit: a deployment waits about this long before it kills.
const termLimit = 10 * time.Second

// termWait is how long the harness waits for an exit after SIGTERM before
// it kills: longer than termLimit, so that a slow exit is measured, not
// only flagged.
const termWait = 30 * time.Second

// termRecord is one SIGTERM the harness sent and how long the process took
// to exit.
type termRecord struct {
	name string
	why  string
	took time.Duration
	// killed is set when the process still ran termWait after SIGTERM.
	killed bool
}

func (t termRecord) String() string {
	s := fmt.Sprintf("%s (%s) %.2fs", t.name, t.why, t.took.Seconds())
	if t.killed {
		s += " then killed -9"
	}
	return s
}

// stopProc sends p SIGTERM, waits up to termWait for its exit (then kills
// it) and records how long it took; why names the occasion. It reports
// whether the exit was clean, like proc.stop.
func (h *harness) stopProc(p *proc, why string) bool {
	if !p.Running() {
		return p.stop(termWait)
	}
	began := time.Now()
	clean := p.stop(termWait)
	took := time.Since(began)
	rec := termRecord{name: p.Name(), why: why, took: took, killed: took >= termWait}
	h.mu.Lock()
	h.terms = append(h.terms, rec)
	h.mu.Unlock()
	if took > termLimit {
		h.logf("%s needed %.1fs from SIGTERM to exit (limit %s); log tail:\n%s", p.Name(), took.Seconds(), termLimit, p.LogTail(1500))
	}
	return clean
}

// shutdown stops every herald process of the run with SIGTERM, at once, as
// a deployment does, and records each exit's time.
func (h *harness) shutdown() {
	var wg sync.WaitGroup
	for _, p := range h.procs() {
		wg.Go(func() { h.stopProc(p, "shutdown") })
	}
	wg.Wait()
}

// checkTerms adds the SIGTERM-to-exit figures to r and fails it when a
// process needed more than termLimit.
func (h *harness) checkTerms(r *result) {
	h.mu.Lock()
	r.terms = slices.Clone(h.terms)
	h.mu.Unlock()
	var slow []string
	for _, t := range r.terms {
		if t.took > termLimit {
			slow = append(slow, t.String())
		}
	}
	p50, longest := termQuantiles(r.terms)
	r.expect("SIGTERM to exit within "+termLimit.String(), len(slow) == 0,
		"%d SIGTERMs, p50 %.2fs, max %.2fs; over the limit: %v", len(r.terms), p50.Seconds(), longest.Seconds(), slow)
}

// termQuantiles returns the median (the lower middle one of an even
// count) and the longest time from SIGTERM to exit.
func termQuantiles(ts []termRecord) (p50, longest time.Duration) {
	if len(ts) == 0 {
		return 0, 0
	}
	d := make([]time.Duration, len(ts))
	for i, t := range ts {
		d[i] = t.took
	}
	slices.Sort(d)
	return d[(len(d)-1)/2], d[len(d)-1]
}

func formatTerms(ts []termRecord) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = t.String()
	}
	return strings.Join(parts, "; ")
}
