package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/internal/testkit/faultproxy"
	"github.com/heraldhq/herald/internal/testkit/proctest"
)

// faultRecord is one fault as it happened.
type faultRecord struct {
	at     time.Duration
	took   time.Duration
	name   string
	detail string
	// window is how many repeated sends the fault can explain: the
	// deliveries that may have been inside the send-to-commit window when
	// it struck (0 for faults that cannot cause one).
	window int
	err    error
	// Outcome counts when the fault ended: duplicates are the repeated
	// emails and webhooks.
	accepted, emails, webhooks, duplicates int
}

// step is one fault of the schedule.
type step struct {
	name string
	do   func(ctx context.Context) (detail string, window int, err error)
	// est is roughly how long do takes, to spread the load over the
	// whole schedule.
	est time.Duration
}

// faultPause is how long a timed fault (latency, blackhole, SMTP refusal,
// broker down) lasts.
const faultPause = 3 * time.Second

// brokerPause is the pause between stop_app and start_app.
const brokerPause = time.Second

// hangPause is how long the broker-hang fault lasts: longer than a
// connection's handshake may take, so that every process meets a broker
// that takes its TCP connection and never answers.
const hangPause = 12 * time.Second

// smtpHangPause is how long the SMTP server hangs: longer than a
// delivery's lease (HERALD_SMTP_TIMEOUT plus 15s).
const smtpHangPause = smtpTimeout + leaseExtra + 3*time.Second

// schedule returns the faults of the run, in order. Every kind of fault
// the run's broker and store have a counterpart for appears once; the
// kills appear once per role instance. The faults left out are logged.
func (h *harness) schedule() []step {
	var skipped []string
	// pg-failover needs a standby: a cluster of the run's own (--pg).
	if h.cluster == nil && !leaves(h.storeRow.leftOut, "pg-failover") {
		skipped = append(skipped, "pg-failover (--pg shared: one server, no standby to promote)")
	}
	skipped = append(skipped, h.brokerSkips()...)
	skipped = append(skipped, lines(h.storeRow.leftOut)...)
	var steps []step
	for _, st := range h.fullSchedule() {
		if !leaves(h.brokerRow.leftOut, st.name) && !leaves(h.storeRow.leftOut, st.name) {
			steps = append(steps, st)
		}
	}
	if h.br != nil {
		steps = h.placeOwn(steps, h.brokerRow.own)
	}
	steps = h.placeOwn(steps, h.storeRow.own)
	return h.leaveOut(steps, skipped)
}

// fullSchedule is every common fault the run can have, in order, before
// the broker and the store leave theirs out and add their own.
func (h *harness) fullSchedule() []step {
	// The drop notifications' six attempts, a second apart, after a
	// baseline of faultPause.
	smtpDrop := step{name: "smtp-drop", do: h.smtpDrop, est: faultPause + 8*time.Second}
	// The isolation faults: a baseline of --outage-span, then the fault
	// for as long.
	hole := step{name: "endpoint-blackhole", do: h.endpointBlackhole, est: 2*h.o.outageSpan + 2*time.Second}
	outage := step{name: "channel-outage", do: h.channelOutage, est: 2*h.o.outageSpan + 2*time.Second}
	var failover, purge, restart []step
	if h.cluster != nil {
		failover = []step{{name: "pg-failover", do: h.pgFailover, est: 5 * time.Second}}
	}
	if h.br != nil {
		purge = []step{{name: "queue-purge", do: h.queuePurge, est: faultPause}}
		restart = []step{h.br.restart(h)}
	}
	var out []step
	add := func(ss ...step) { out = append(out, ss...) }
	add(h.pgFault("pg-latency"))
	add(h.relayKill(0)...)
	add(h.kill(h.workers[0]))
	add(h.proxyFault("broker-latency")...)
	add(h.crash(h.workers[1], "after-send"),
		step{name: "pg-terminate", do: h.terminateBackends},
		step{name: "smtp-4xx", do: h.smtpRefusal, est: faultPause},
		step{name: "webhook-fail", do: h.webhookFail, est: faultPause},
		step{name: "smtp-throttle", do: h.smtpThrottle, est: throttlePause})
	add(h.proxyFault("broker-reset")...)
	add(step{name: "poison", do: h.poison}, hole, h.crash(h.workers[0], "after-commit"), h.pgFault("pg-reset"),
		step{name: "duplicates", do: h.duplicates})
	add(failover...)
	add(outage, smtpDrop)
	add(h.proxyFault("broker-blackhole")...)
	add(purge...)
	add(restart...)
	add(step{name: "smtp-hang", do: h.smtpHang, est: smtpHangPause})
	add(h.proxyFault("broker-hang")...)
	add(h.pgFault("pg-blackhole"))
	add(h.relayKill(1)...)
	add(h.kill(h.workers[1]))
	return out
}

// proxyFaults are the faults of the broker proxies, which a broker reached
// without them (chaosBroker.direct) leaves out, broker-reset excepted.
var proxyFaults = []string{"broker-latency", "broker-blackhole", "broker-hang"}

// brokerSkips returns what the run's broker leaves out, for the log: its
// own faults left out, the other brokers' own faults, and the proxy faults
// when no proxy is in its path.
func (h *harness) brokerSkips() []string {
	row := h.brokerRow
	out := lines(row.leftOut)
	if h.br == nil {
		return out
	}
	for _, b := range chaosBrokers {
		for _, f := range b.own {
			if b.name != row.name && f.elsewhere != "" {
				out = append(out, f.name+" ("+strings.ReplaceAll(f.elsewhere, "%s", row.name)+")")
			}
		}
	}
	if row.direct != "" {
		for _, f := range proxyFaults {
			out = append(out, f+" ("+row.direct+")")
		}
	}
	return out
}

// lines are the log's words for faults left out.
func lines(out []leftOut) []string {
	var ls []string
	for _, l := range out {
		ls = append(ls, strings.Join(l.faults, ", ")+" ("+l.why+")")
	}
	return ls
}

// placeOwn adds a broker's or a store's own faults to steps, each after
// the step it follows.
func (h *harness) placeOwn(steps []step, own []ownFault) []step {
	for _, f := range own {
		if !slices.ContainsFunc(steps, func(st step) bool { return st.name == f.after }) {
			panic("chaos: fault " + f.name + " follows " + f.after + ", which the schedule lacks")
		}
		do := f.do
		steps = insertAfter(steps, f.after, step{name: f.name, est: f.est, do: func(ctx context.Context) (string, int, error) {
			return do(h, ctx)
		}})
	}
	return steps
}

// timed gives a fault that lasts faultPause its estimate; a reset is
// instant.
func timed(st step) step {
	if !strings.HasSuffix(st.name, "-reset") {
		st.est = faultPause
	}
	return st
}

// latency delays what passes the proxies each visits by 10 to 50 ms (drawn
// once) each way for faultPause.
func (h *harness) latency(ctx context.Context, each func(func(*faultproxy.Proxy))) (string, int, error) {
	d := time.Duration(10+h.rng.IntN(40)) * time.Millisecond
	each(func(p *faultproxy.Proxy) { p.Latency(d) })
	err := sleep(ctx, faultPause)
	each((*faultproxy.Proxy).Pass)
	return fmt.Sprintf("+%s each way for %s", d, faultPause), 0, err
}

// blackhole makes the proxies each visits swallow everything for
// faultPause.
func blackhole(ctx context.Context, each func(func(*faultproxy.Proxy))) (string, int, error) {
	each((*faultproxy.Proxy).Blackhole)
	err := sleep(ctx, faultPause)
	each((*faultproxy.Proxy).Pass)
	return fmt.Sprintf("blackhole for %s", faultPause), 0, err
}

// pgFault is one of the database proxies' faults: pg-latency, pg-reset or
// pg-blackhole.
func (h *harness) pgFault(name string) step {
	return timed(step{name: name, do: func(ctx context.Context) (string, int, error) {
		switch name {
		case "pg-latency":
			return h.latency(ctx, h.eachPG)
		case "pg-reset":
			n := 0
			h.eachPG(func(p *faultproxy.Proxy) { n += p.Reset() })
			// A reset may cut a worker's transaction after its send.
			return fmt.Sprintf("%d connections reset", n), len(h.workers) * prefetch, nil
		default: // pg-blackhole
			return blackhole(ctx, h.eachPG)
		}
	}})
}

// proxyFault is one of the broker proxies' faults (broker-latency,
// broker-reset, broker-blackhole, broker-hang), or none: without a broker,
// and when no proxy is in its path (broker-reset excepted).
func (h *harness) proxyFault(name string) []step {
	if h.br == nil || h.brokerRow.direct != "" && name != "broker-reset" {
		return nil
	}
	st := timed(step{name: name, do: func(ctx context.Context) (string, int, error) {
		switch name {
		case "broker-latency":
			return h.latency(ctx, h.eachProxy)
		case "broker-reset":
			if c, ok := h.br.(connCutter); ok && h.brokerRow.direct != "" {
				return fmt.Sprintf("%d broker connections cut", c.cutConns()), 0, nil
			}
			n := 0
			h.eachProxy(func(p *faultproxy.Proxy) { n += p.Reset() })
			return fmt.Sprintf("%d connections reset", n), 0, nil
		case "broker-hang":
			// Cut every connection, then take new ones and never
			// answer: each process meets a broker that accepts TCP
			// and is silent, at its handshake.
			n := 0
			h.eachProxy(func(p *faultproxy.Proxy) { p.Blackhole(); n += p.Reset() })
			err := sleep(ctx, hangPause)
			h.eachProxy((*faultproxy.Proxy).Pass)
			return fmt.Sprintf("%d connections reset, then TCP accepted and never answered for %s", n, hangPause), 0, err
		default: // broker-blackhole
			return blackhole(ctx, h.eachProxy)
		}
	}})
	if name == "broker-hang" {
		st.est = hangPause
	}
	return []step{st}
}

// kill is kill-9 of a relay or a worker.
func (h *harness) kill(s *slot) step {
	return step{name: "kill-9 " + s.name, est: time.Second, do: func(ctx context.Context) (string, int, error) {
		return h.killRestart(ctx, s)
	}}
}

// relayKill is kill-9 of the i-th relay, or none without relays.
func (h *harness) relayKill(i int) []step {
	if i >= len(h.relays) {
		return nil
	}
	return []step{h.kill(h.relays[i])}
}

// crash is a worker's crash at point.
func (h *harness) crash(s *slot, point string) step {
	return step{name: "crash " + point + " " + s.name, est: 5 * time.Second, do: func(ctx context.Context) (string, int, error) {
		return h.crashRestart(ctx, s, point)
	}}
}

// knownFaults are the faults a schedule is made of, by the first word of
// their steps' names: the common ones, then the brokers' and the stores'
// own. What --skip-faults accepts and what docs/chaos.md's fault table
// lists (both checked by tests).
var knownFaults = append(slices.Clone(commonFaults), ownFaultNames()...)

// commonFaults are the faults of the schedule that no one broker or store
// owns (kill-leader is the cluster's broker-restart).
var commonFaults = []string{
	"kill-9", "crash", "pg-terminate", "pg-latency", "pg-reset", "pg-blackhole", "pg-failover",
	"broker-latency", "broker-reset", "broker-blackhole", "broker-hang", "broker-restart", "kill-leader",
	"queue-purge", "smtp-4xx", "smtp-hang", "smtp-throttle", "smtp-drop", "webhook-fail",
	"endpoint-blackhole", "channel-outage",
	"poison", "duplicates",
}

// ownFaultNames are the brokers' and the stores' own faults, by first
// word, those of the common ones left out.
func ownFaultNames() []string {
	var own []ownFault
	for _, b := range chaosBrokers {
		own = append(own, b.own...)
	}
	for _, s := range chaosStores {
		own = append(own, s.own...)
	}
	var out []string
	for _, f := range own {
		if n := faultOf(f.name); !slices.Contains(commonFaults, n) && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// insertAfter returns steps with more inserted after the step named name
// (at the end when there is none).
func insertAfter(steps []step, name string, more ...step) []step {
	i := slices.IndexFunc(steps, func(st step) bool { return st.name == name })
	if i < 0 {
		return append(steps, more...)
	}
	return slices.Insert(steps, i+1, more...)
}

// faultOf is the fault a step's name belongs to: its first word.
func faultOf(name string) string {
	first, _, _ := strings.Cut(name, " ")
	return first
}

// leaveOut drops the steps --skip-faults names for this transport and logs
// every fault left out.
func (h *harness) leaveOut(steps []step, skipped []string) []step {
	var out []step
	for _, st := range steps {
		if !slices.Contains(knownFaults, faultOf(st.name)) {
			panic("chaos: fault " + st.name + " is missing from knownFaults")
		}
		if h.o.skips(h.transport, st.name) {
			skipped = append(skipped, st.name+" (--skip-faults)")
			continue
		}
		if len(h.o.onlyFaults) > 0 && !slices.Contains(h.o.onlyFaults, faultOf(st.name)) {
			skipped = append(skipped, st.name+" (not in --faults)")
			continue
		}
		out = append(out, st)
	}
	for _, s := range skipped {
		h.logf("fault skipped on %s: %s", h.transport, s)
	}
	return out
}

// eachPG applies fn to every database proxy.
func (h *harness) eachPG(fn func(*faultproxy.Proxy)) {
	for _, p := range h.pgProxies {
		fn(p)
	}
}

// eachProxy applies fn to every broker proxy.
func (h *harness) eachProxy(fn func(*faultproxy.Proxy)) {
	for _, p := range h.mqProxies {
		fn(p)
	}
}

// killRestart kills a relay or worker with SIGKILL and starts it again. A
// killed worker may have had every delivery it held inside the
// send-to-commit window.
func (h *harness) killRestart(ctx context.Context, s *slot) (string, int, error) {
	s.p.kill()
	window := 0
	if s.args == "worker" {
		window = prefetch
	}
	if err := h.startSlot(ctx, s, nil); err != nil {
		return "", window, err
	}
	return "killed and restarted", window, nil
}

// crashRestart restarts a worker (gracefully) with HERALD_DEBUG_CRASH at
// point:K, waits for it to kill itself there, then starts it normally. The
// crash kills the whole process: besides the delivery at the crash point,
// every other one it held may have been inside the window.
func (h *harness) crashRestart(ctx context.Context, s *slot, point string) (string, int, error) {
	k := 2 + h.rng.IntN(8)
	if !h.stopProc(s.p, "crash restart") {
		// stop killed it: the fault failed, but the role must run on.
		err := fmt.Errorf("%s did not stop cleanly on SIGTERM within %s (killed):\n%s", s.name, termWait, s.p.LogTail(1500))
		if serr := h.startSlot(ctx, s, nil); serr != nil {
			err = errors.Join(err, serr)
		}
		return "", prefetch, err
	}
	env := h.envWith(map[string]string{
		"HERALD_METRICS_ADDR": s.metrics,
		"HERALD_DEBUG_CRASH":  point + ":" + strconv.Itoa(k),
	})
	p, err := h.startProc(s.name+"-crash", env, s.args)
	if err != nil {
		return "", 0, err
	}
	p.expected = true
	s.p = p
	detail := fmt.Sprintf("crashed at %s pass %d", point, k)
	if p.WaitExit(ctx, 30*time.Second) != nil {
		p.kill()
		detail = fmt.Sprintf("never reached %s pass %d within 30s; killed -9 instead", point, k)
	} else if !p.LogContains("debug crash") {
		return "", prefetch, fmt.Errorf("%s exited without reaching its crash point (%v):\n%s", s.name, p.Err(), p.LogTail(1500))
	}
	if err := h.startSlot(ctx, s, nil); err != nil {
		return "", prefetch, err
	}
	return detail + "; restarted", prefetch, nil
}

// terminateBackends kills the scratch database's backends, except the
// harness's own. A terminated worker transaction after a send repeats it.
func (h *harness) terminateBackends(ctx context.Context) (string, int, error) {
	var n int
	err := h.db.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
FROM pg_stat_activity
WHERE datname = $1 AND pid <> pg_backend_pid() AND application_name IS DISTINCT FROM $2`,
		h.dbName, appName).Scan(&n)
	if err != nil {
		return "", 0, fmt.Errorf("terminate backends: %w", err)
	}
	return fmt.Sprintf("%d backends terminated", n), len(h.workers) * prefetch, nil
}

// smtpRefusal makes the sink answer 451 for a while: every delivery in that
// time is retried, none may be dead-lettered.
func (h *harness) smtpRefusal(ctx context.Context) (string, int, error) {
	h.sink.Fail(451, "4.3.0 chaos: try again later")
	err := sleep(ctx, faultPause)
	h.sink.Fail(0, "")
	return fmt.Sprintf("451 for %s", faultPause), 0, err
}

// poisonBase puts the poison message ids far above any outbox id.
const poisonBase = int64(1_000_000_000_000)

// poison injects messages no worker can process: each must end in the dead
// letters, and nothing else may.
func (h *harness) poison(ctx context.Context) (string, int, error) {
	type msg struct {
		typ  string
		body string
	}
	valid := `{"notification_id":"1","user_id":"u","channel":"email","to":"x@example.com","subject":"s","body":"b"}`
	msgs := []msg{
		{"notification.requested", `this is not JSON {`},
		{"notification.exploded", valid},
		{"notification.requested", `{"user_id":"u","channel":"email"}`},
		{"notification.requested", `"a JSON string, not an object"`},
	}
	base := poisonBase + int64(h.rng.IntN(1000))*100
	if h.br == nil {
		for i, m := range msgs {
			id := base + int64(i)
			payload := m.body
			if !jsonValid(payload) {
				// JSONB cannot hold it; the closest the table gets is a
				// JSON value of the wrong shape.
				payload = `[1, 2, 3]`
			}
			if _, err := h.db.Exec(ctx, `INSERT INTO outbox (id, event_type, payload) VALUES ($1, $2, $3::jsonb)`, id, m.typ, payload); err != nil {
				return "", 0, fmt.Errorf("insert poison outbox row: %w", err)
			}
			h.addPoison(id)
		}
		return fmt.Sprintf("%d poison outbox rows from id %d", len(msgs), base), 0, nil
	}
	var raw []rawMsg
	for i, m := range msgs {
		raw = append(raw, rawMsg{id: base + int64(i), typ: m.typ, body: []byte(m.body), at: time.Now()})
	}
	if err := h.br.publish(ctx, raw); err != nil {
		return "", 0, fmt.Errorf("publish poison: %w", err)
	}
	for _, m := range raw {
		h.addPoison(m.id)
	}
	return fmt.Sprintf("%d poison messages from id %d", len(msgs), base), 0, nil
}

func (h *harness) addPoison(id int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.poisonIDs = append(h.poisonIDs, id)
}

// duplicates delivers a few real, already relayed and sent events again:
// each must be absorbed without a second email.
func (h *harness) duplicates(ctx context.Context) (string, int, error) {
	const n = 5
	if h.br == nil {
		tag, err := h.db.Exec(ctx, `
UPDATE outbox SET processed_at = NULL
WHERE id IN (
	SELECT o.id FROM outbox o
	JOIN notifications n ON n.id = (o.payload->>'notification_id')::bigint
	WHERE o.processed_at IS NOT NULL AND o.event_type = 'notification.requested' AND n.status = 'sent'
	ORDER BY random() LIMIT $1)`, n)
		if err != nil {
			return "", 0, fmt.Errorf("reset processed_at: %w", err)
		}
		return fmt.Sprintf("%d sent rows made unprocessed again", tag.RowsAffected()), 0, nil
	}
	rows, err := h.db.Query(ctx, `
SELECT id, event_type, payload::text, occurred_at FROM outbox
WHERE processed_at IS NOT NULL AND id < $1 AND event_type = 'notification.requested'
ORDER BY random() LIMIT $2`, poisonBase, n)
	if err != nil {
		return "", 0, fmt.Errorf("pick relayed rows: %w", err)
	}
	type ev struct {
		id      int64
		typ     string
		payload string
		at      time.Time
	}
	var evs []ev
	for rows.Next() {
		var e ev
		if err := rows.Scan(&e.id, &e.typ, &e.payload, &e.at); err != nil {
			rows.Close()
			return "", 0, fmt.Errorf("pick relayed rows: %w", err)
		}
		evs = append(evs, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return "", 0, fmt.Errorf("pick relayed rows: %w", err)
	}
	var raw []rawMsg
	for _, e := range evs {
		raw = append(raw, rawMsg{id: e.id, typ: e.typ, body: []byte(e.payload), at: e.at})
	}
	if err := h.br.publish(ctx, raw); err != nil {
		return "", 0, fmt.Errorf("publish again: %w", err)
	}
	return fmt.Sprintf("%d relayed events published again", len(evs)), 0, nil
}

// queuePurge stops the workers (SIGTERM: they hand back what they hold),
// lets the relays fill the queue workers consume, purges it as an operator
// would, and starts the workers again. Every purged notification must come
// back through the reconciler.
func (h *harness) queuePurge(ctx context.Context) (string, int, error) {
	window, note := 0, ""
	for _, s := range h.workers {
		// A worker that does not stop within termWait was killed by
		// stop: what it held may have been inside the send-to-commit
		// window.
		if !h.stopProc(s.p, "queue-purge") {
			window += prefetch
			note += fmt.Sprintf("; %s killed after %s of SIGTERM", s.name, termWait)
			h.logf("%s did not stop cleanly on SIGTERM within %s: killed; log tail:\n%s", s.name, termWait, s.p.LogTail(1500))
		}
	}
	_ = sleep(ctx, faultPause)
	n, err := h.br.purge(ctx)
	for _, s := range h.workers {
		if serr := h.startSlot(ctx, s, nil); serr != nil {
			return "", window, errors.Join(err, serr)
		}
	}
	if err != nil {
		return "", window, err
	}
	return fmt.Sprintf("%d messages purged from the send queue%s", n, note), window, nil
}

// smtpHang makes the sink stop answering for longer than a delivery's
// lease: every send in that time times out (HERALD_SMTP_TIMEOUT), none may
// be dead-lettered, none lost. A message whose DATA the sink took before the
// hang may be accepted after the worker gave up on it: such a send is
// repeated, so every delivery the workers held is in the window.
func (h *harness) smtpHang(ctx context.Context) (string, int, error) {
	h.sink.SetHang(true)
	err := sleep(ctx, smtpHangPause)
	h.sink.SetHang(false)
	return fmt.Sprintf("SMTP server silent for %s (lease %s)", smtpHangPause, smtpTimeout+leaseExtra), len(h.workers) * prefetch, err
}

// killAPI kills the api with SIGKILL under the load and starts it again on
// its address: the clients' retries with the same Idempotency-Key must
// find what the killed process stored, and store nothing twice.
func (h *harness) killAPI(ctx context.Context) (string, int, error) {
	addr := strings.TrimPrefix(h.apiBase, "http://")
	h.api.kill()
	began := time.Now()
	p, err := h.startProc("api", h.envWith(map[string]string{"HERALD_HTTP_ADDR": addr}), "api")
	if err != nil {
		return "", 0, err
	}
	h.api = p
	if err := proctest.WaitHTTP(ctx, h.apiBase+"/readyz", 60*time.Second); err != nil {
		return "", 0, fmt.Errorf("api not ready after its restart: %w\n%s", err, p.LogTail(2000))
	}
	return fmt.Sprintf("killed and restarted, ready after %.1fs", time.Since(began).Seconds()), 0, nil
}
