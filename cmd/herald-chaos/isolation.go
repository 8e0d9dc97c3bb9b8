package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The isolation faults measure the others: the traffic that has nothing to
// do with what misbehaves must keep flowing while it does (STYLE.md, "A
// test of isolation measures the others").
//
//   - endpoint-blackhole: one of the receiver's endpoints (the victim)
//     becomes a black hole, its connects never completing, and holeBurst
//     more webhooks to it are created at once; the other endpoints'
//     delivered/s before and during, and the attempts its webhooks spent
//     (a connect that never completes is the endpoint's outage: none).
//   - channel-outage: the SMTP server's address becomes a black hole and
//     its open sessions are cut; the webhooks' delivered/s before and
//     during, and the attempts the emails spent (none but the cut
//     sessions' transactions).

// hookEndpoints is how many endpoints the receiver has: the load's webhooks
// take them in turn.
const hookEndpoints = 20

// holeBurst is how many webhooks to the victim the endpoint-blackhole fault
// creates as the hole opens: more than the two workers' prefetch, so that
// deliveries held waiting for the victim would leave no room for others.
const holeBurst = 4 * prefetch

// isolationRecord is what an isolation fault measured, for verify.
type isolationRecord struct {
	fault      string
	start, end time.Time
	// window is the repeats the fault can explain: connects of herald's
	// caught in the victim's queue, SMTP sessions cut.
	window int
	// offered is how many of the others' notifications were created
	// during the fault; delivered how many of theirs were received, and
	// before how many in the baseline.
	offered, delivered, before int
}

// stallSample is the fewest of the others' notifications created during a
// fault for their receiving none to count as a stall: below it (the short
// run's load offers 2-3 in 3s) delivery latency alone can leave the
// window empty, so the figures are reported, not judged.
const stallSample = 5

// endpointBlackhole black-holes the victim endpoint for --outage-span,
// after a baseline of the same span.
func (h *harness) endpointBlackhole(ctx context.Context) (string, int, error) {
	span := h.o.outageSpan
	_, others0 := h.hooks.delivered(victim)
	began := time.Now()
	if err := sleep(ctx, span); err != nil {
		return "", 0, err
	}
	_, others1 := h.hooks.delivered(victim)
	before := rate(others1-others0, time.Since(began))

	caught, err := h.hooks.blackhole(victim)
	start := time.Now()
	if err != nil {
		return "", 0, err
	}
	at0, others1 := h.hooks.delivered(victim)
	var ids []int64
	for k := range holeBurst {
		id, err := h.createExtra(ctx, h.holeKey(k), fmt.Sprintf(`{"user_id":"chaos-hole","channel":"webhook","to":%q,"body":{"chaos":%q,"i":%d}}`,
			h.load.hookURLs[victim], h.runID, holeIndex(k)))
		if err != nil {
			_ = h.hooks.restore(victim)
			return "", caught, err
		}
		ids = append(ids, id)
	}
	h.mu.Lock()
	h.holeIDs = append(h.holeIDs, ids...)
	h.mu.Unlock()
	err = sleep(ctx, time.Until(start.Add(span)))
	at1, others2 := h.hooks.delivered(victim)
	end := time.Now()
	if rerr := h.hooks.restore(victim); rerr != nil {
		return "", caught, rerr
	}
	if err != nil {
		return "", caught, err
	}
	during := rate(others2-others1, end.Sub(start))
	rec := isolationRecord{fault: "endpoint-blackhole", start: start, end: end, window: caught, delivered: others2 - others1, before: others1 - others0}
	offered, spent, deferred, err := h.keepIsolation(ctx, rec, `channel = 'webhook' AND recipient <> $3`, `n.recipient = $3`, h.load.hookURLs[victim])
	if err != nil {
		return "", caught, err
	}
	return fmt.Sprintf("endpoint %d of %d black-holed for %s, %d more webhooks to it: the other %d endpoints %.1f/s before, %.1f/s during (%d of theirs created meanwhile); %d to it during; its notifications spent %d attempts (%d deferred records) so far; %d connects caught",
		victim, hookEndpoints, span, holeBurst, hookEndpoints-1, before, during, offered, at1-at0, spent, deferred, caught), caught, nil
}

// channelOutage black-holes the SMTP server's address and cuts its open
// sessions for --outage-span, after a baseline of the same span.
func (h *harness) channelOutage(ctx context.Context) (string, int, error) {
	span := h.o.outageSpan
	// The load's webhooks only: the ones endpoint-blackhole held up may
	// still be going.
	hooks0, mails0, began := h.hooks.loadCount(), h.sink.Count(), time.Now()
	if err := sleep(ctx, span); err != nil {
		return "", 0, err
	}
	hooksBefore := rate(h.hooks.loadCount()-hooks0, time.Since(began))
	mailsBefore := rate(h.sink.Count()-mails0, time.Since(began))

	cut, caught, err := h.smtpFront.down()
	start := time.Now()
	window := cut + caught
	if err != nil {
		return "", window, err
	}
	hooks1, mails1 := h.hooks.loadCount(), h.sink.Count()
	err = sleep(ctx, span)
	hooks2, mails2 := h.hooks.loadCount(), h.sink.Count()
	end := time.Now()
	if uerr := h.smtpFront.up(); uerr != nil {
		return "", window, uerr
	}
	if err != nil {
		return "", window, err
	}
	during := rate(hooks2-hooks1, end.Sub(start))
	rec := isolationRecord{fault: "channel-outage", start: start, end: end, window: window, delivered: hooks2 - hooks1, before: hooks1 - hooks0}
	offered, spent, deferred, err := h.keepIsolation(ctx, rec, `channel = 'webhook'`, `n.channel = 'email'`)
	if err != nil {
		return "", window, err
	}
	return fmt.Sprintf("SMTP server black-holed for %s, %d sessions cut: webhooks %.1f/s before, %.1f/s during (%d created meanwhile); emails %.1f/s before, %d accepted during; emails spent %d attempts (%d deferred records) so far; %d connects caught",
		span, cut, hooksBefore, during, offered, mailsBefore, mails2-mails1, spent, deferred, caught), window, nil
}

// keepIsolation completes rec with how many of the others' notifications
// were created during the fault (the webhooks matching others, $3 on is
// args) and keeps it, and returns that count with the attempts (and
// deferred records) spent meanwhile on the notifications the fault held up
// (matching held).
func (h *harness) keepIsolation(ctx context.Context, rec isolationRecord, others, held string, args ...any) (offered, spent, deferred int, err error) {
	rec.offered, err = h.countCreated(ctx, others, rec.start, rec.end, args...)
	if err != nil {
		return 0, 0, 0, err
	}
	h.mu.Lock()
	h.isolations = append(h.isolations, rec)
	h.mu.Unlock()
	spent, deferred, err = h.spentDuring(ctx, held, rec.start, rec.end, args...)
	return rec.offered, spent, deferred, err
}

// holeKey is the Idempotency-Key of the k-th endpoint-blackhole webhook.
func (h *harness) holeKey(k int) string { return fmt.Sprintf("chaos-%s-hole-%d", h.runID, k) }

// extraBase is the first "i" of the webhooks the faults create: above any
// index of the load's.
const extraBase = 1_000_000

// holeIndex is the "i" in the body of the k-th endpoint-blackhole webhook.
func holeIndex(k int) int { return extraBase + k }

// createExtra creates a notification of a fault's own through the API, as
// the load does (same key on every try), and returns its id.
func (h *harness) createExtra(ctx context.Context, key, body string) (int64, error) {
	last := ""
	for try := 0; try < 50; try++ {
		status, id, _, err := h.load.post(ctx, body, key)
		switch {
		case err != nil:
			last = err.Error()
		case status >= 200 && status < 300:
			n, err := strconv.ParseInt(id, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("create %s: id %q: %w", key, id, err)
			}
			return n, nil
		case status == 429 || status >= 500:
			last = strconv.Itoa(status)
		default:
			return 0, fmt.Errorf("create %s: %d", key, status)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("create %s: gave up after 50 tries: %s", key, last)
}

// countCreated counts the notifications created in [start, end) that
// match where ($3 on is args).
func (h *harness) countCreated(ctx context.Context, where string, start, end time.Time, args ...any) (int, error) {
	var n int
	err := h.db.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE created_at >= $1 AND created_at < $2 AND `+where,
		append([]any{start, end}, args...)...).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count notifications created: %w", err)
	}
	return n, nil
}

// backlogAfter reads what became of the notifications a fault held up:
// those matching where ($2 on is args) created before end and not sent
// by then. It returns how many there were, how many are not sent now, and
// how long after end the last of the others was sent.
func (h *harness) backlogAfter(ctx context.Context, where string, end time.Time, args ...any) (held, unsent int, after time.Duration, err error) {
	var last *time.Time
	err = h.db.QueryRow(ctx, `
SELECT count(*), count(*) FILTER (WHERE status <> 'sent'), max(sent_at)
FROM notifications WHERE created_at < $1 AND (status <> 'sent' OR sent_at >= $1) AND `+where,
		append([]any{end}, args...)...).Scan(&held, &unsent, &last)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("read the backlog after %s: %w", end.Format(time.TimeOnly), err)
	}
	if last != nil {
		after = last.Sub(end)
	}
	return held, unsent, after, nil
}

// spentDuring counts the attempts that started in [start, end) on the
// notifications that match where ($3 on is args; n is notifications):
// the ones spent (retry, dead: what HERALD_MAX_RETRIES counts) and the
// deferred ones, which spend nothing.
func (h *harness) spentDuring(ctx context.Context, where string, start, end time.Time, args ...any) (spent, deferred int, err error) {
	err = h.db.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE a.outcome IN ('retry', 'dead')), count(*) FILTER (WHERE a.outcome = 'deferred')
FROM delivery_attempts a JOIN notifications n ON n.id = a.notification_id
WHERE a.started_at >= $1 AND a.started_at < $2 AND `+where,
		append([]any{start, end}, args...)...).Scan(&spent, &deferred)
	if err != nil {
		return 0, 0, fmt.Errorf("count attempts: %w", err)
	}
	return spent, deferred, nil
}

// verifyIsolation checks the isolation faults: the others kept flowing
// (some of theirs received while it lasted, when any were created), no
// attempt spent that the fault does not explain, and the victim's
// webhooks all delivered once. It returns the webhook-ids of those
// webhooks and how many repeats they had.
func (h *harness) verifyIsolation(ctx context.Context, r *result, hooks map[string]int) (map[string]bool, int, error) {
	known := map[string]bool{}
	repeats := 0
	for _, rec := range h.isolations {
		var spent int
		var err error
		if rec.fault == "endpoint-blackhole" {
			spent, _, err = h.spentDuring(ctx, `n.recipient = $3`, rec.start, rec.end, h.load.hookURLs[victim])
		} else {
			spent, _, err = h.spentDuring(ctx, `n.channel = 'email'`, rec.start, rec.end)
		}
		if err != nil {
			return nil, 0, err
		}
		what := "the other endpoints"
		// What it held up: the victim's webhooks; the load's emails.
		where, args := `id = ANY($2)`, []any{h.holeIDs}
		if rec.fault == "channel-outage" {
			what = "the webhooks"
			where, args = `channel = 'email' AND id = ANY($2)`, []any{acceptedIDs(h.load)}
		}
		held, unsent, after, err := h.backlogAfter(ctx, where, rec.end, args...)
		if err != nil {
			return nil, 0, err
		}
		h.noteFault(rec.fault, fmt.Sprintf("; after: the %d it held up sent within %.1fs (%d not sent); %d attempts spent during it in all", held, after.Seconds(), unsent, spent))
		// A stall is the fault's when the others flowed in the baseline.
		stalled := rec.offered >= stallSample && rec.before > 0 && rec.delivered == 0
		r.expect(rec.fault+": the others flowed, no attempt spent", !stalled && spent <= rec.window,
			"%s: %d received in the baseline, %d while it lasted (%d created meanwhile; a stall is judged from %d); %d attempts spent during it, %d explained (connects caught, sessions cut)",
			what, rec.before, rec.delivered, rec.offered, stallSample, spent, rec.window)
	}
	if len(h.holeIDs) == 0 {
		if h.ran("endpoint-blackhole") {
			r.expect("endpoint-blackhole webhooks delivered", false, "the fault created none")
		}
		return known, 0, nil
	}
	status, attempts, err := h.st.states(ctx, h.holeIDs)
	if err != nil {
		return nil, 0, err
	}
	var bad []string
	sent := 0
	for _, id := range h.holeIDs {
		wid := "msg_" + strconv.FormatInt(id, 10)
		known[wid] = true
		c := hooks[wid]
		repeats += max(0, c-1)
		if status[id] == "sent" && c > 0 {
			sent++
			continue
		}
		bad = append(bad, fmt.Sprintf("%d %s after %d attempts, received %d times", id, status[id], attempts[id], c))
	}
	r.expect("endpoint-blackhole webhooks delivered", len(bad) == 0, "%d of %d sent and received; %s", sent, len(h.holeIDs), strings.Join(bad, "; "))
	return known, repeats, nil
}

// noteFault adds a note to the report's row of the fault named.
func (h *harness) noteFault(name, note string) {
	for i := range h.faults {
		if h.faults[i].name == name {
			h.faults[i].detail += note
		}
	}
}

// smtpFront is the SMTP server's address as herald knows it: a TCP
// forwarder to the sink on a port the channel-outage fault black-holes,
// cutting the sessions open through it, as a mail server that goes off
// the network does.
type smtpFront struct {
	target string
	hole   *hole

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func startSMTPFront(target string) (*smtpFront, error) {
	hl, ln, err := listenHole()
	if err != nil {
		return nil, fmt.Errorf("SMTP front: %w", err)
	}
	f := &smtpFront{target: target, hole: hl, ln: ln, conns: map[net.Conn]struct{}{}}
	f.wg.Go(func() { f.serve(ln) })
	return f, nil
}

// addr is the front's host:port, HERALD_SMTP_URL's.
func (f *smtpFront) addr() string { return f.hole.addr }

func (f *smtpFront) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		f.wg.Go(func() { f.forward(c) })
	}
}

// forward joins a client connection to a fresh one to the sink until
// either side ends.
func (f *smtpFront) forward(c net.Conn) {
	up, err := net.DialTimeout("tcp", f.target, 5*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	if !f.track(c, up) {
		return
	}
	defer f.untrack(c, up)
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, c)
		_ = up.Close()
		close(done)
	}()
	_, _ = io.Copy(c, up)
	_ = c.Close()
	<-done
}

// track registers a forwarded pair; it refuses (and closes) one while the
// front is down.
func (f *smtpFront) track(cs ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln == nil {
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	}
	for _, c := range cs {
		f.conns[c] = struct{}{}
	}
	return true
}

func (f *smtpFront) untrack(cs ...net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range cs {
		delete(f.conns, c)
	}
}

// down black-holes the front's port, then cuts every session open through
// it. It returns the sessions cut and the connects caught in the queue.
func (f *smtpFront) down() (cut, caught int, err error) {
	f.mu.Lock()
	ln := f.ln
	f.ln = nil
	f.mu.Unlock()
	if ln == nil {
		return 0, 0, fmt.Errorf("the SMTP front is down already")
	}
	caught, err = f.hole.swallow(ln)
	f.mu.Lock()
	for c := range f.conns {
		_ = c.Close()
	}
	cut = len(f.conns) / 2
	f.mu.Unlock()
	return cut, caught, err
}

// up ends the black hole and serves the port again.
func (f *smtpFront) up() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln != nil {
		return nil
	}
	ln, err := f.hole.open()
	if err != nil {
		return err
	}
	f.ln = ln
	f.wg.Go(func() { f.serve(ln) })
	return nil
}

// close stops the front and every session through it.
func (f *smtpFront) close() {
	f.mu.Lock()
	if f.ln != nil {
		_ = f.ln.Close()
		f.ln = nil
	}
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
	f.hole.close()
}
