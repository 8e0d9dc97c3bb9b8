package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/internal/testkit/smtptest"
)

// throttlePause is how long the sink answers 421 to MAIL FROM in the
// smtp-throttle fault: long enough for a worker's backoff to show (or its
// absence: a worker that tries again at once sends a MAIL every few
// milliseconds).
const throttlePause = 20 * time.Second

// throttleMarker is in the sink's 421 text, so that an attempt the
// throttle cost can be told from others in delivery_attempts.
const throttleMarker = "chaos-throttle"

// dropCount is how many notifications the smtp-drop fault creates.
const dropCount = 3

// dropPrefix starts the local part of the recipients the sink drops the
// connection on (after their DATA). No load notification has it.
const dropPrefix = "drop-"

// dropWait bounds how long the smtp-drop fault watches its notifications
// cycle: their attempts (HERALD_MAX_RETRIES+1, HERALD_RETRY_DELAY apart)
// take a few seconds; past this, the drain check decides.
const dropWait = 30 * time.Second

// isDropRecipient reports whether the sink drops the connection after the
// data of a transaction to rcpt.
func isDropRecipient(rcpt string) bool {
	return strings.HasPrefix(strings.ToLower(strings.Trim(rcpt, "<>")), dropPrefix)
}

// smtpThrottle makes the sink answer 421 to every MAIL FROM for
// throttlePause (greeting and EHLO stay fine), as a provider asking its
// client to slow down does, and counts the MAIL commands it got meanwhile.
// Nothing may be lost and no attempt spent; verify checks the attempts.
func (h *harness) smtpThrottle(ctx context.Context) (string, int, error) {
	mails, emails := h.sink.MailCommands(), h.sink.Count()
	h.sink.FailAt(smtptest.StepMail, 421, "4.7.0 "+throttleMarker+": too many messages, slow down")
	err := sleep(ctx, throttlePause)
	h.sink.FailAt(smtptest.StepMail, 0, "")
	mails = h.sink.MailCommands() - mails
	emails = h.sink.Count() - emails
	h.mu.Lock()
	h.throttleMails = mails
	h.mu.Unlock()
	return fmt.Sprintf("421 to MAIL for %s: %d MAIL commands (%.1f/s), %d emails accepted",
		throttlePause, mails, float64(mails)/throttlePause.Seconds(), emails), 0, err
}

// smtpDrop measures the good-mail rate for a moment, then creates
// dropCount notifications to recipients the sink drops the connection on
// after their data, and watches them until each ended (or dropWait): each
// must end failed after its retries without holding up the others. It
// reports the good-mail rate before and while they cycled.
func (h *harness) smtpDrop(ctx context.Context) (string, int, error) {
	before, began := h.sink.Count(), time.Now()
	if err := sleep(ctx, faultPause); err != nil {
		return "", 0, err
	}
	baseline := rate(h.sink.Count()-before, time.Since(began))

	drops, emails, start := h.sink.Drops(), h.sink.Count(), time.Now()
	var ids []int64
	for k := range dropCount {
		id, err := h.createDrop(ctx, k)
		if err != nil {
			return "", 0, err
		}
		ids = append(ids, id)
	}
	h.mu.Lock()
	h.dropIDs = append(h.dropIDs, ids...)
	h.mu.Unlock()

	deadline := start.Add(dropWait)
	var status map[int64]string
	var attempts map[int64]int
	for {
		var err error
		status, attempts, err = h.st.states(ctx, ids)
		if err != nil {
			return "", 0, err
		}
		ended := 0
		for _, s := range status {
			if s != "pending" {
				ended++
			}
		}
		if ended == len(ids) || time.Now().After(deadline) {
			break
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return "", 0, err
		}
	}
	took := time.Since(start)
	during := rate(h.sink.Count()-emails, took)
	var states []string
	for _, id := range ids {
		states = append(states, fmt.Sprintf("%d %s/%d", id, status[id], attempts[id]))
	}
	return fmt.Sprintf("%d to %s*: %d connections dropped after DATA; after %.1fs (status/attempts) %s; good mail %.1f/s before (%.0fs), %.1f/s while they cycled (%.1fs)",
		len(ids), dropPrefix, h.sink.Drops()-drops, took.Seconds(), strings.Join(states, ", "),
		baseline, faultPause.Seconds(), during, took.Seconds()), 0, nil
}

// dropKey is the Idempotency-Key of the k-th smtp-drop notification.
func (h *harness) dropKey(k int) string { return fmt.Sprintf("chaos-%s-drop-%d", h.runID, k) }

// createDrop creates the k-th smtp-drop notification through the API, as
// the load does (same key on every try), and returns its id.
func (h *harness) createDrop(ctx context.Context, k int) (int64, error) {
	body := fmt.Sprintf(`{"user_id":"chaos-drop","channel":"email","to":"%s%s-%d@example.com","subject":"chaos %s drop #%d","body":"the sink drops the connection after this message's data"}`,
		dropPrefix, h.runID, k, h.runID, k)
	return h.createExtra(ctx, h.dropKey(k), body)
}

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// verifySMTPFaults checks the outcomes of smtp-throttle and smtp-drop: no
// attempt spent on a throttled MAIL; every drop notification failed, none
// pending, none sent. It returns the outbox ids of the drop notifications'
// events, which may be dead letters.
func (h *harness) verifySMTPFaults(ctx context.Context, r *result, emails map[string]int, domain string) (map[int64]bool, error) {
	if h.ran("smtp-throttle") {
		spent, err := h.st.throttleSpent(ctx)
		if err != nil {
			return nil, err
		}
		r.expect("smtp-throttle spent no attempt", spent == 0,
			"%d delivery attempts spent on a 421 to MAIL; %d MAIL commands during the %s throttle", spent, h.throttleMails, throttlePause)
	}
	dropEvents := map[int64]bool{}
	if len(h.dropIDs) == 0 {
		if h.ran("smtp-drop") {
			r.expect("smtp-drop notifications failed", false, "the fault created none")
		}
		return dropEvents, nil
	}
	status, attempts, err := h.st.states(ctx, h.dropIDs)
	if err != nil {
		return nil, err
	}
	var bad []string
	for _, id := range h.dropIDs {
		mails := emails["<"+strconv.FormatInt(id, 10)+"@"+domain+">"]
		switch s := status[id]; {
		case s == "failed" && mails == 0:
			r.dropFailed++
		case s == "":
			bad = append(bad, fmt.Sprintf("%d has no row", id))
		default:
			bad = append(bad, fmt.Sprintf("%d %s after %d attempts, %d emails", id, s, attempts[id], mails))
		}
	}
	r.expect("smtp-drop notifications failed", len(bad) == 0,
		"%d of %d failed after their retries (HERALD_MAX_RETRIES=%d), %d connections dropped after DATA; %s",
		r.dropFailed, len(h.dropIDs), maxRetries, h.sink.Drops(), strings.Join(bad, "; "))
	return h.st.events(ctx, h.dropIDs)
}

// ran reports whether the schedule held the fault.
func (h *harness) ran(name string) bool {
	for _, f := range h.faults {
		if f.name == name {
			return true
		}
	}
	return false
}

func idStrings(ids []int64) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = strconv.FormatInt(id, 10)
	}
	return out
}
