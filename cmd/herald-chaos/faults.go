package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
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
	// Outcome counts when the fault ended.
	accepted, emails, duplicates int
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

// schedule returns the faults of the transport, in order. Every kind of
// fault the harness knows appears once; the kills appear once per role
// instance.
func (h *harness) schedule() []step {
	timed := func(st step) step {
		if !strings.HasSuffix(st.name, "-reset") {
			st.est = faultPause
		}
		return st
	}
	pg := func(name string) step {
		return timed(step{name: name, do: func(ctx context.Context) (string, int, error) {
			switch name {
			case "pg-latency":
				d := time.Duration(10+h.rng.IntN(40)) * time.Millisecond
				h.pgProxy.Latency(d)
				err := sleep(ctx, faultPause)
				h.pgProxy.Pass()
				return fmt.Sprintf("+%s each way for %s", d, faultPause), 0, err
			case "pg-reset":
				n := h.pgProxy.Reset()
				// A reset may cut a worker's transaction after its send.
				return fmt.Sprintf("%d connections reset", n), len(h.workers) * prefetch, nil
			default: // pg-blackhole
				h.pgProxy.Blackhole()
				err := sleep(ctx, faultPause)
				h.pgProxy.Pass()
				return fmt.Sprintf("blackhole for %s", faultPause), 0, err
			}
		}})
	}
	mq := func(name string) step {
		return timed(step{name: name, do: func(ctx context.Context) (string, int, error) {
			switch name {
			case "amqp-latency":
				d := time.Duration(10+h.rng.IntN(40)) * time.Millisecond
				h.mqProxy.Latency(d)
				err := sleep(ctx, faultPause)
				h.mqProxy.Pass()
				return fmt.Sprintf("+%s each way for %s", d, faultPause), 0, err
			case "amqp-reset":
				return fmt.Sprintf("%d connections reset", h.mqProxy.Reset()), 0, nil
			default: // amqp-blackhole
				h.mqProxy.Blackhole()
				err := sleep(ctx, faultPause)
				h.mqProxy.Pass()
				return fmt.Sprintf("blackhole for %s", faultPause), 0, err
			}
		}})
	}
	kill := func(s *slot) step {
		return step{name: "kill-9 " + s.name, est: time.Second, do: func(ctx context.Context) (string, int, error) {
			return h.killRestart(ctx, s)
		}}
	}
	crash := func(s *slot, point string) step {
		return step{name: "crash " + point + " " + s.name, est: 5 * time.Second, do: func(ctx context.Context) (string, int, error) {
			return h.crashRestart(ctx, s, point)
		}}
	}
	other := []step{
		{name: "pg-terminate", do: h.terminateBackends},
		{name: "smtp-4xx", do: h.smtpRefusal, est: faultPause},
		{name: "poison", do: h.poison},
		{name: "duplicates", do: h.duplicates},
	}
	if h.transport == "rabbitmq" {
		return []step{
			pg("pg-latency"),
			kill(h.relays[0]),
			kill(h.workers[0]),
			mq("amqp-latency"),
			crash(h.workers[1], "after-send"),
			other[0], // pg-terminate
			other[1], // smtp-4xx
			mq("amqp-reset"),
			other[2], // poison
			crash(h.workers[0], "after-commit"),
			pg("pg-reset"),
			other[3], // duplicates
			mq("amqp-blackhole"),
			{name: "broker-restart", do: h.brokerRestart, est: 8 * time.Second},
			pg("pg-blackhole"),
			kill(h.relays[1]),
			kill(h.workers[1]),
		}
	}
	return []step{
		pg("pg-latency"),
		kill(h.workers[0]),
		crash(h.workers[1], "after-send"),
		other[0],
		other[1],
		other[2],
		crash(h.workers[0], "after-commit"),
		pg("pg-reset"),
		other[3],
		pg("pg-blackhole"),
		kill(h.workers[1]),
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
	if !s.p.stop(30 * time.Second) {
		return "", 0, fmt.Errorf("%s did not stop cleanly on SIGTERM:\n%s", s.name, s.p.LogTail(1500))
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
	if h.transport == "table" {
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
	ch, closeCh, err := h.amqpChannel(ctx)
	if err != nil {
		return "", 0, err
	}
	defer closeCh()
	for i, m := range msgs {
		id := base + int64(i)
		if err := publishConfirmed(ctx, ch, id, m.typ, []byte(m.body), time.Now()); err != nil {
			return "", 0, fmt.Errorf("publish poison %d: %w", id, err)
		}
		h.addPoison(id)
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
	if h.transport == "table" {
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
WHERE processed_at IS NOT NULL AND id < $1
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
	ch, closeCh, err := h.amqpChannel(ctx)
	if err != nil {
		return "", 0, err
	}
	defer closeCh()
	for _, e := range evs {
		if err := publishConfirmed(ctx, ch, e.id, e.typ, []byte(e.payload), e.at); err != nil {
			return "", 0, fmt.Errorf("republish %d: %w", e.id, err)
		}
	}
	return fmt.Sprintf("%d relayed events published again", len(evs)), 0, nil
}

// brokerRestart stops the RabbitMQ application for a few seconds. The
// broker is shared with other users: the window is kept short, and the
// restart happens even when the run is interrupted.
func (h *harness) brokerRestart(ctx context.Context) (string, int, error) {
	if err := rabbitmqctl(ctx, "stop_app"); err != nil {
		// stop_app may have half-happened: make sure the broker is up.
		return "", 0, errors.Join(err, rabbitmqctl(context.Background(), "start_app"))
	}
	began := time.Now()
	// start_app itself takes seconds; a short pause keeps the whole
	// window near the few seconds other users of the broker can bear.
	_ = sleep(ctx, brokerPause)
	if err := rabbitmqctl(context.WithoutCancel(ctx), "start_app"); err != nil {
		return "", 0, err
	}
	return fmt.Sprintf("broker down %.1fs", time.Since(began).Seconds()), 0, nil
}

// amqpChannel opens a channel on the scratch vhost, straight to the broker.
func (h *harness) amqpChannel(ctx context.Context) (*amqp.Channel, func(), error) {
	conn, err := amqp.DialConfig(h.directMQ, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		return nil, nil, fmt.Errorf("dial broker: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("open channel: %w", err)
	}
	return ch, func() { conn.Close() }, nil
}

// publishConfirmed publishes a message as the relay does, to the
// notifications exchange, and waits for the broker's confirm.
func publishConfirmed(ctx context.Context, ch *amqp.Channel, id int64, typ string, body []byte, at time.Time) error {
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("confirm mode: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "notifications", "notification.requested", true, false, amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		Type:         typ,
		MessageId:    strconv.FormatInt(id, 10),
		Timestamp:    at,
		Headers:      amqp.Table{"x-occurred-at": at.UnixMicro()},
		Body:         body,
	})
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("wait for confirm: %w", err)
	}
	if !ok {
		return errors.New("broker nacked the publish")
	}
	return nil
}
