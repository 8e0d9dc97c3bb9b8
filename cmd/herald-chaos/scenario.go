package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heraldhq/herald/internal/testkit/faultproxy"
	"github.com/heraldhq/herald/internal/testkit/smtptest"
)

// result is what one transport's run found.
type result struct {
	transport  string
	nodes      int
	faults     []faultRecord
	accepted   int
	refused    int
	delivered  int
	lost       int
	duplicates int
	window     int
	dead       int
	poison     int
	drain      time.Duration
	loadTime   time.Duration
	attempts   int64
	samples    []sample
	failures   []error
	checks     []check
	// dropFailed counts the smtp-drop notifications that ended failed, as
	// they must.
	dropFailed int
	// terms are the SIGTERMs the harness sent and how long each exit took.
	terms []termRecord
	// channels are the figures of each channel of the load, email first.
	channels []*channelFigures
	// pg is the database's topology when the run had a cluster of its
	// own; failover is what pg-failover measured (nil without one).
	pg       string
	failover *failoverFigures
}

// row is a notification as the checks read it.
type row struct {
	id     int64
	status string
}

// channelFigures are one channel's share of the load and what became of it.
type channelFigures struct {
	name       string
	accepted   int
	delivered  int
	lost       int
	duplicates int
	failed     int
}

// channel returns the figures of channel name, added on first use.
func (r *result) channel(name string) *channelFigures {
	for _, c := range r.channels {
		if c.name == name {
			return c
		}
	}
	c := &channelFigures{name: name}
	r.channels = append(r.channels, c)
	return c
}

// check is one invariant and whether it held.
type check struct {
	name string
	ok   bool
	note string
}

func (r *result) expect(name string, ok bool, format string, args ...any) {
	note := fmt.Sprintf(format, args...)
	r.checks = append(r.checks, check{name, ok, note})
	if !ok {
		r.failures = append(r.failures, fmt.Errorf("%s: %s", name, note))
	}
}

// sample is one reading of the resources that must not grow.
type sample struct {
	label      string
	goroutines float64
	rss        float64
	dbConns    int
}

// scenario runs the load with the faults, waits for the drain and checks
// the invariants.
func (h *harness) scenario(ctx context.Context) (*result, error) {
	steps := h.schedule()
	// The creates are spread over the schedule so that every fault meets
	// live traffic.
	spread := time.Duration(len(steps)) * h.o.step
	for _, s := range steps {
		spread += s.est
	}
	h.start = time.Now()
	l := newLoad(h.apiBase, h.runID, h.hooks.urls(h.runID), h.o.n, h.o.clients, spread, h.start.Add(h.o.loadTimeout))
	h.load = l
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		l.run(ctx)
	}()
	h.logf("load started: %d notifications from %d clients over ~%s; %d faults, one every ~%s", h.o.n, h.o.clients, spread, len(steps), h.o.step)

	res := &result{transport: h.transport, nodes: h.nodes}
	if h.run.report != "" {
		res.transport = h.run.report
	}
	// The first sample is taken under load, with every pool warm.
	if err := sleep(ctx, h.o.step); err != nil {
		return nil, err
	}
	res.samples = append(res.samples, h.sample(ctx, "under load"))
	for i, s := range steps {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		began := time.Now()
		rec := faultRecord{at: h.offset(), name: s.name}
		h.logf("fault %d/%d %s ...", i+1, len(steps), s.name)
		rec.detail, rec.window, rec.err = s.do(ctx)
		rec.took = time.Since(began)
		rec.accepted = l.acceptedCount()
		rec.emails = h.sink.Count()
		rec.duplicates = rec.emails - len(h.sink.CountByMessageID())
		hooks, _ := h.hooks.deliveries()
		for _, c := range hooks {
			rec.webhooks += c
			rec.duplicates += c - 1
		}
		if rec.err != nil {
			h.logf("fault %s FAILED: %v", s.name, rec.err)
		} else {
			h.logf("fault %s: %s", s.name, rec.detail)
		}
		h.faults = append(h.faults, rec)
		if i < len(steps)-1 {
			if err := sleep(ctx, h.o.step); err != nil {
				return nil, err
			}
		}
	}
	select {
	case <-loadDone:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	// Every fault is over: the network passes, the sink accepts.
	h.eachPG((*faultproxy.Proxy).Pass)
	h.eachProxy((*faultproxy.Proxy).Pass)
	h.sink.Fail(0, "")
	h.sink.FailAt(smtptest.StepMail, 0, "")
	h.sink.SetHang(false)
	h.hooks.setFailing(false)
	if err := h.hooks.restore(victim); err != nil {
		return nil, err
	}
	if err := h.smtpFront.up(); err != nil {
		return nil, err
	}
	res.loadTime = h.offset()
	h.logf("load done: %d accepted, %d refused, %d requests; faults over, waiting for the drain", len(l.accepted), len(l.refused), l.attempts.Load())
	res.samples = append(res.samples, h.sample(ctx, "load done"))

	drainStart := time.Now()
	drained, why := h.waitDrain(ctx, l)
	res.drain = time.Since(drainStart)
	if drained {
		h.logf("drained in %.1fs", res.drain.Seconds())
	} else {
		h.logf("NOT drained after %.1fs: %s", res.drain.Seconds(), why)
	}
	res.expect("drained", drained, "within %s: %s", h.o.drainTimeout, why)
	if nb, ok := h.br.(drainNoter); ok {
		if note := nb.drainNote(ctx); note != "" {
			h.logf("%s", note)
		}
	}
	res.samples = append(res.samples, h.settledSample(ctx, res.samples[0]))
	if err := h.verify(ctx, l, res); err != nil {
		return nil, err
	}
	return res, nil
}

// sample reads the api's goroutines and resident memory, and the number of
// herald connections to the scratch database.
func (h *harness) sample(ctx context.Context, label string) sample {
	s := sample{label: label, goroutines: -1, rss: -1, dbConns: -1}
	m, err := scrapeMetrics(ctx, h.apiBase+"/metrics")
	if err == nil {
		s.goroutines, s.rss = m["go_goroutines"], m["process_resident_memory_bytes"]
	}
	s.dbConns = h.st.conns(ctx)
	return s
}

// settledSample takes the last sample once the system had a moment to go
// idle: it polls for up to 10s until the goroutines are back near the
// first sample, and keeps the last reading otherwise.
func (h *harness) settledSample(ctx context.Context, first sample) sample {
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := h.sample(ctx, "drained")
		if s.goroutines >= 0 && s.goroutines <= first.goroutines+10 || time.Now().After(deadline) {
			return s
		}
		if sleep(ctx, 250*time.Millisecond) != nil {
			return s
		}
	}
}

func scrapeMetrics(ctx context.Context, url string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			out[name] = f
		}
	}
	return out, nil
}

// waitDrain polls until nothing is left to do: no unprocessed outbox row,
// no accepted notification pending, every poison message dead-lettered, the
// broker's queues empty, and the sink quiet, three polls in a row.
func (h *harness) waitDrain(ctx context.Context, l *load) (bool, string) {
	ids := acceptedIDs(l)
	h.mu.Lock()
	drops := append([]int64(nil), h.dropIDs...)
	// The endpoint-blackhole webhooks must be sent too.
	ids = append(ids, h.holeIDs...)
	h.mu.Unlock()
	deadline := time.Now().Add(h.o.drainTimeout)
	quiet, lastEmails := 0, -1
	why := ""
	for {
		ok, w := h.drainedOnce(ctx, ids, drops)
		why = w
		emails := h.sink.Count() + h.hooks.count()
		if ok && emails == lastEmails {
			quiet++
		} else {
			quiet = 0
		}
		lastEmails = emails
		if quiet >= 3 {
			return true, "nothing left"
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false, why
		}
		_ = sleep(ctx, 500*time.Millisecond)
	}
}

func (h *harness) drainedOnce(ctx context.Context, ids, drops []int64) (bool, string) {
	if ok, why := h.st.drained(ctx, ids, drops); !ok || h.br == nil {
		return ok, why
	}
	n, where, err := h.br.waiting(ctx)
	if err != nil {
		return false, err.Error()
	}
	if n > 0 {
		return false, fmt.Sprintf("%d messages waiting in the broker (%s)", n, where)
	}
	dead, _, err := h.deadLetters(ctx)
	if err != nil {
		return false, err.Error()
	}
	if n := countIn(dead, h.poisonIDs); n < len(h.poisonIDs) {
		return false, fmt.Sprintf("%d of %d poison messages dead-lettered", n, len(h.poisonIDs))
	}
	return true, ""
}

// deadLetters returns the distinct message ids of the dead letters and
// their total: the broker's (rabbitmq: read and handed back), or without
// one the table transport's, on the store (events finished with a
// reason).
func (h *harness) deadLetters(ctx context.Context) (map[int64]bool, int, error) {
	if h.br == nil {
		return h.st.deadLetters(ctx)
	}
	return h.br.deadLetters(ctx)
}

func countIn(set map[int64]bool, ids []int64) int {
	n := 0
	for _, id := range ids {
		if set[id] {
			n++
		}
	}
	return n
}

func acceptedIDs(l *load) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]int64, 0, len(l.accepted))
	for _, s := range l.accepted {
		if id, err := strconv.ParseInt(s, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

func jsonValid(s string) bool { return json.Valid([]byte(s)) }

// verify checks the invariants from the store, the sink, the webhook
// receiver and the broker.
func (h *harness) verify(ctx context.Context, l *load, r *result) error {
	h.verifyLoad(l, r)
	// The store is read once for the rows, the events left and the
	// failed notifications.
	t, err := h.st.tally(ctx, h.dropIDs)
	if err != nil {
		return err
	}
	d := h.countDeliveries(l, r, t)
	h.verifyRows(l, r, t, d)
	if err := h.verifyReceived(ctx, r, d); err != nil {
		return err
	}
	return h.verifyEnd(ctx, r, t, d)
}

// verifyLoad checks the client's side and the faults: every create
// accepted, every fault injected.
func (h *harness) verifyLoad(l *load, r *result) {
	r.faults = h.faults
	if h.cluster != nil {
		r.pg, r.failover = h.pg, h.cluster.failover
	}
	r.accepted = len(l.accepted)
	r.refused = len(l.refused)
	r.attempts = l.attempts.Load()
	r.poison = len(h.poisonIDs)

	var sample []string
	for i, why := range l.refused {
		if len(sample) < 5 {
			sample = append(sample, fmt.Sprintf("#%d: %s", i, why))
		}
	}
	r.expect("every create accepted", r.refused == 0, "%d of %d never got a 2xx %v", r.refused, h.o.n, sample)

	var faultErrs []string
	window := 0
	for _, f := range h.faults {
		window += f.window
		if f.err != nil {
			faultErrs = append(faultErrs, f.name+": "+f.err.Error())
		}
	}
	r.window = window
	r.expect("every fault injected", len(faultErrs) == 0, "%d faults, %d failed %v", len(h.faults), len(faultErrs), faultErrs)
}

// deliveries are what the receiving ends got, matched to the accepted
// creates.
type deliveries struct {
	// emails are by Message-ID, hooks by webhook-id, and hookIndex the
	// load's index of each webhook's body.
	emails, hooks map[string]int
	hookIndex     map[string]int
	// domain is the Message-IDs'.
	domain string
	// known and knownHooks are the Message-IDs and webhook-ids a
	// notification explains.
	known, knownHooks map[string]bool
	// hookMismatch counts the webhooks that carried another
	// notification's body; missing the accepted creates without a row,
	// mismatched those answered with another row's id.
	hookMismatch, missing, mismatched int
	// dropEvents are the events of the smtp-drop notifications.
	dropEvents map[int64]bool
}

// countDeliveries matches each accepted create to its row and to what its
// channel's receiving end got, and counts the delivered and the repeated.
func (h *harness) countDeliveries(l *load, r *result, t *tally) *deliveries {
	d := &deliveries{emails: h.sink.CountByMessageID(), known: map[string]bool{}, knownHooks: map[string]bool{}}
	d.hooks, d.hookIndex = h.hooks.deliveries()
	d.domain = smtpFrom[strings.IndexByte(smtpFrom, '@')+1:]
	r.channel("email")
	for i, id := range l.accepted {
		cf := r.channel(l.channel(i))
		cf.accepted++
		rw, ok := t.byKey[l.key(i)]
		switch {
		case !ok:
			d.missing++
			continue
		case strconv.FormatInt(rw.id, 10) != id:
			d.mismatched++
		}
		// What the channel's receiving end got: emails by Message-ID,
		// webhooks by webhook-id (msg_ and the notification id).
		var c int
		if cf.name == "webhook" {
			wid := "msg_" + id
			d.knownHooks[wid] = true
			c = d.hooks[wid]
			if j, ok := d.hookIndex[wid]; ok && j != i {
				d.hookMismatch++
			}
		} else {
			mid := "<" + id + "@" + d.domain + ">"
			d.known[mid] = true
			c = d.emails[mid]
		}
		if rw.status == "sent" && c > 0 {
			r.delivered++
			cf.delivered++
		}
		if rw.status == "failed" {
			cf.failed++
		}
		if c > 1 {
			r.duplicates += c - 1
			cf.duplicates += c - 1
		}
	}
	for _, cf := range r.channels {
		cf.lost = cf.accepted - cf.delivered
	}
	return d
}

// verifyRows checks one row per accepted create and nothing lost.
func (h *harness) verifyRows(l *load, r *result, t *tally, d *deliveries) {
	strangers := 0
	dropKeys := map[string]bool{}
	for k := range h.dropIDs {
		dropKeys[h.dropKey(k)] = true
	}
	for k := range h.holeIDs {
		dropKeys[h.holeKey(k)] = true
	}
	for k := range t.byKey {
		if dropKeys[k] {
			continue
		}
		i, ok := keyIndex(k, h.runID)
		if !ok {
			strangers++
			continue
		}
		if _, acc := l.accepted[i]; !acc {
			if _, ref := l.refused[i]; !ref {
				strangers++
			}
		}
	}
	r.lost = r.accepted - r.delivered
	r.expect("one row per accepted create", d.missing == 0 && d.mismatched == 0 && t.keyless == 0 && strangers == 0,
		"%d accepted without a row, %d answered with another id, %d rows without a key, %d rows nobody asked for", d.missing, d.mismatched, t.keyless, strangers)
	var perChannel []string
	for _, cf := range r.channels {
		perChannel = append(perChannel, fmt.Sprintf("%s %d of %d (%d failed)", cf.name, cf.lost, cf.accepted, cf.failed))
	}
	r.expect("nothing lost", r.lost == 0, "%d accepted notifications not sent and received (an email, a 2xx webhook); per channel: %s",
		r.lost, strings.Join(perChannel, ", "))
}

// verifyReceived checks the SMTP faults' and the isolation faults'
// outcomes, and that the receiving ends got nothing a notification does
// not explain, every webhook signed.
func (h *harness) verifyReceived(ctx context.Context, r *result, d *deliveries) error {
	// An email of an smtp-drop notification is the drop check's failure,
	// not a phantom.
	for _, id := range h.dropIDs {
		d.known["<"+strconv.FormatInt(id, 10)+"@"+d.domain+">"] = true
	}
	var err error
	if d.dropEvents, err = h.verifySMTPFaults(ctx, r, d.emails, d.domain); err != nil {
		return err
	}
	phantom := 0
	for mid := range d.emails {
		if !d.known[mid] {
			phantom++
		}
	}
	r.expect("no email without a notification", phantom == 0, "%d Message-IDs match no accepted notification", phantom)
	holeHooks, holeRepeats, err := h.verifyIsolation(ctx, r, d.hooks)
	if err != nil {
		return err
	}
	for wid := range holeHooks {
		d.knownHooks[wid] = true
	}
	r.duplicates += holeRepeats
	r.channel("webhook").duplicates += holeRepeats
	phantomHooks := 0
	for wid := range d.hooks {
		if !d.knownHooks[wid] {
			phantomHooks++
		}
	}
	r.expect("no webhook without a notification", phantomHooks == 0 && d.hookMismatch == 0,
		"%d webhook-ids match no accepted webhook notification, %d carried another notification's body", phantomHooks, d.hookMismatch)
	badSig, badBody := h.hooks.refused()
	r.expect("every webhook signed", badSig == 0 && badBody == 0,
		"%d requests with a missing or wrong Standard Webhooks signature, %d with a body the load never sent", badSig, badBody)
	return nil
}

// verifyEnd checks what the run left: the events all processed, the
// repeats explained, the dead letters only those expected, no process
// dead on its own, no resource grown.
func (h *harness) verifyEnd(ctx context.Context, r *result, t *tally, d *deliveries) error {
	r.expect("outbox drained", t.unprocessed == 0, "%d unprocessed outbox rows", t.unprocessed)
	r.expect("duplicates explained", r.duplicates <= r.window,
		"%d repeated emails and webhooks; the logged kills could explain at most %d", r.duplicates, r.window)

	// The smtp-drop notifications must fail (checked above); no other
	// notification may.
	deadIDs, deadTotal, err := h.deadLetters(ctx)
	if err != nil {
		return err
	}
	poisonDead := countIn(deadIDs, h.poisonIDs)
	r.dead = t.failed + poisonDead
	dropDead, others := 0, 0
	for id := range deadIDs {
		switch {
		case d.dropEvents[id]:
			dropDead++
		case !slices.Contains(h.poisonIDs, id):
			others++
		}
	}
	r.expect("dead letters are the poison and the smtp-drop notifications",
		poisonDead == r.poison && t.otherFailed == 0 && others == 0,
		"%d failed notifications (%d of them not smtp-drop ones) + %d dead-lettered poison (injected %d); %d dead letters of smtp-drop events; %d other dead letters; %d dead letters in all",
		t.failed, t.otherFailed, poisonDead, r.poison, dropDead, others, deadTotal)

	exits := h.unexpectedExits()
	r.expect("no process died on its own", len(exits) == 0, "%s", strings.Join(exits, "\n"))

	// Each process's pool holds up to max(10, HERALD_PREFETCH+4) = 14
	// connections at the default prefetch, plus one listener.
	procs := 1 + len(h.relays) + len(h.workers)
	limit := procs * 15
	r.expect("no resource growth", !grows(r.samples, limit), "%s (connection limit %d)", formatSamples(r.samples), limit)
	return nil
}

// keyIndex parses chaos-RUN-I back to I.
func keyIndex(key, runID string) (int, bool) {
	rest, ok := strings.CutPrefix(key, "chaos-"+runID+"-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	return i, err == nil
}

// grows reports clear growth across the samples: goroutines or memory
// rising at each reading and ending far above the first (generous margins:
// buffers grow under load without leaking), or more database connections
// than the running processes' pools may hold (a pool warming up is no
// leak; connections of killed processes left open are).
func grows(s []sample, connLimit int) bool {
	if len(s) < 3 {
		return false
	}
	a, b, c := s[0], s[1], s[2]
	switch {
	case a.goroutines < b.goroutines && b.goroutines < c.goroutines && c.goroutines > 2*a.goroutines+50:
		return true
	case a.rss < b.rss && b.rss < c.rss && c.rss > 2*a.rss+64<<20:
		return true
	case c.dbConns > connLimit:
		return true
	}
	return false
}

func formatSamples(s []sample) string {
	var parts []string
	for _, x := range s {
		parts = append(parts, fmt.Sprintf("%s: goroutines=%.0f rss=%.1fMiB db_conns=%d", x.label, x.goroutines, x.rss/(1<<20), x.dbConns))
	}
	return strings.Join(parts, "; ")
}

// print writes the report; its last line is the summary line.
func (r *result) print(w io.Writer) {
	fmt.Fprintf(w, "\n== herald chaos report: transport %s ==\n", r.transport)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "at\ttook\tfault\tresult\taccepted\temails\twebhooks\trepeats\twindow")
	for _, f := range r.faults {
		res := f.detail
		if f.err != nil {
			res = "FAILED: " + strings.SplitN(f.err.Error(), "\n", 2)[0]
		}
		fmt.Fprintf(tw, "%6.1fs\t%5.1fs\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", f.at.Seconds(), f.took.Seconds(), f.name, res, f.accepted, f.emails, f.webhooks, f.duplicates, f.window)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nload: %d accepted, %d refused, %d requests, %.1fs; drain %.1fs\n", r.accepted, r.refused, r.attempts, r.loadTime.Seconds(), r.drain.Seconds())
	fmt.Fprintf(w, "resources: %s\n", formatSamples(r.samples))
	fmt.Fprintf(w, "SIGTERM to exit: %s\n\n", formatTerms(r.terms))
	for _, c := range r.checks {
		mark := "ok  "
		if !c.ok {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "%s %s: %s\n", mark, c.name, c.note)
	}
	channels := ""
	for _, c := range r.channels {
		channels += fmt.Sprintf(" accepted_%[1]s=%[2]d lost_%[1]s=%[3]d duplicates_%[1]s=%[4]d", c.name, c.accepted, c.lost, c.duplicates)
	}
	nodes := ""
	if r.nodes > 1 {
		nodes = fmt.Sprintf(" nodes=%d", r.nodes)
	}
	failover := ""
	if r.pg != "" {
		failover = " pg=" + r.pg
	}
	if f := r.failover; f != nil {
		failover += fmt.Sprintf(" failover_s=%.2f failover_refused=%d", f.firstCreate.Seconds(), f.refusedCreates)
	}
	p50, longest := termQuantiles(r.terms)
	fmt.Fprintf(w, "chaos: transport=%s accepted=%d delivered=%d lost=%d duplicates=%d explained=%d dead=%d faults=%d drain_s=%.1f sigterms=%d sigterm_p50_s=%.2f sigterm_max_s=%.2f%s%s%s\n",
		r.transport, r.accepted, r.delivered, r.lost, r.duplicates, min(r.duplicates, r.window), r.dead, len(r.faults), r.drain.Seconds(),
		len(r.terms), p50.Seconds(), longest.Seconds(), channels, nodes, failover)
}
