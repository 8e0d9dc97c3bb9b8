package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/store/sqlite"
	"github.com/heraldhq/herald/internal/testkit/deliverytest"
	"github.com/heraldhq/herald/internal/testkit/webhooktest"
)

// statusEvent is a status event's payload as a consumer reads it.
type statusEvent struct {
	NotificationID string    `json:"notification_id"`
	UserID         string    `json:"user_id"`
	Channel        string    `json:"channel"`
	Status         string    `json:"status"`
	Attempts       int       `json:"attempts"`
	At             time.Time `json:"at"`
	LastError      string    `json:"last_error"`
}

// Separate api, relay and worker processes on PostgreSQL and RabbitMQ: a
// queue another service binds to notification.* sees exactly one
// notification.sent per delivered notification and one notification.failed
// for the dead-lettered one, although the worker is killed (SIGKILL) in the
// middle of the run and another takes over.
func TestStatusEventsOnRabbitMQAcrossWorkerKill(t *testing.T) {
	t.Parallel()
	s := newStack(t, map[string]string{"HERALD_MAX_RETRIES": "0", "HERALD_PREFETCH": "4", "HERALD_SMTP_TIMEOUT": "2s"})
	s.smtp.SetDataLatency(20 * time.Millisecond)
	s.smtp.DropAfterData(func(rcpt string) bool { return rcpt == "dead@example.com" })
	s.startAPI(nil)
	s.start("relay")

	const n = 40
	var ids []string
	for i := range n {
		r := s.api.create(t, fmt.Sprintf("r%d@example.com", i), nil)
		require.Equal(t, 201, r.Status, r.Body)
		ids = append(ids, r.ID)
	}
	dead := s.api.create(t, "dead@example.com", nil)
	require.Equal(t, 201, dead.Status, dead.Body)
	// The relay declares the topology with its first publish. The other
	// service's queue is bound before any worker runs, so before anything
	// settles.
	s.waitTopology()
	ch := s.channel()
	q, err := ch.QueueDeclare("status-consumer", true, false, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(q.Name, "notification.*", "notifications", false, nil))

	w := s.start("worker")
	require.Eventually(t, func() bool {
		return s.count("SELECT count(*) FROM notifications WHERE status = 'sent'") >= 5
	}, 30*time.Second, 5*time.Millisecond, "the first worker delivered nothing")
	w.Kill()
	require.Less(t, s.count("SELECT count(*) FROM notifications WHERE status = 'sent'"), n, "the kill came after the run: nothing was in flight")
	s.start("worker")

	for _, id := range ids {
		s.waitStatus(id, "sent", 60*time.Second)
	}
	s.waitStatus(dead.ID, "failed", 60*time.Second)
	// Every status row relayed: every event is in the queue (a confirm
	// means the broker took it).
	s.waitOutboxEmpty()

	seen := map[string][]string{} // notification id -> event types
	for _, d := range drain(t, ch, q.Name) {
		if d.RoutingKey == "notification.requested" {
			continue // the binding matches the requests relayed after it too
		}
		require.Equal(t, d.RoutingKey, d.Type)
		require.NotEmpty(t, d.MessageId, "message id = outbox id")
		var ev statusEvent
		require.NoError(t, json.Unmarshal(d.Body, &ev), string(d.Body))
		require.Equal(t, "email", ev.Channel)
		require.Equal(t, "u1", ev.UserID)
		require.False(t, ev.At.IsZero())
		seen[ev.NotificationID] = append(seen[ev.NotificationID], d.RoutingKey)
		if ev.NotificationID == dead.ID {
			require.Equal(t, "failed", ev.Status)
			require.NotEmpty(t, ev.LastError)
		} else {
			require.Equal(t, "sent", ev.Status)
			require.Equal(t, 1, ev.Attempts)
		}
	}
	for _, id := range ids {
		require.Equal(t, []string{"notification.sent"}, seen[id], "notification %s", id)
	}
	require.Equal(t, []string{"notification.failed"}, seen[dead.ID])
	require.Len(t, seen, n+1, "an event for a notification that does not exist")
	// No status event reached a worker (it would be poison, dead-lettered
	// by the broker consumer): one dead letter, the dead notification's.
	dl := drain(t, ch, "notifications.send.dlq")
	require.Len(t, dl, 1)
	require.Equal(t, "notification.requested", dl[0].Type)
}

// statusReceiver is the operator's status endpoint: it checks each
// request's signature with its own HMAC code, answers 503 while failing, and
// keeps the events it accepted by webhook-id.
type statusReceiver struct {
	srv     *httptest.Server
	key     []byte
	failing atomic.Bool
	tries   atomic.Int64

	mu       sync.Mutex
	accepted map[string]statusBody // by webhook-id
	repeats  int
	bad      []string
}

type statusBody struct {
	Type string      `json:"type"`
	Data statusEvent `json:"data"`
}

func startStatusReceiver(t *testing.T, key []byte) *statusReceiver {
	r := &statusReceiver{key: key, accepted: map[string]statusBody{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *statusReceiver) serve(w http.ResponseWriter, req *http.Request) {
	r.tries.Add(1)
	body, _ := io.ReadAll(req.Body)
	id := req.Header.Get("webhook-id")
	valid := webhooktest.Verify(r.key, req.Header, body, time.Now()) == nil
	r.mu.Lock()
	defer r.mu.Unlock()
	if !valid {
		r.bad = append(r.bad, id)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	if r.failing.Load() {
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
		return
	}
	var b statusBody
	if err := json.Unmarshal(body, &b); err != nil {
		r.bad = append(r.bad, id+": "+err.Error())
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	if _, dup := r.accepted[id]; dup {
		r.repeats++
	}
	r.accepted[id] = b
	w.WriteHeader(http.StatusNoContent)
}

func (r *statusReceiver) snapshot() (map[string]statusBody, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]statusBody, len(r.accepted))
	for k, v := range r.accepted {
		out[k] = v
	}
	return out, append([]string(nil), r.bad...)
}

// The embedded mode (serve on SQLite, the outbox table) with
// HERALD_STATUS_WEBHOOK_URL: while the endpoint answers 503 the
// notifications are delivered all the same and their status events wait;
// once it recovers every status event arrives, signed, at least once.
func TestStatusWebhookFailsThenRecovers(t *testing.T) {
	t.Parallel()
	key := []byte("0123456789abcdef0123456789abcdef")
	rcv := startStatusReceiver(t, key)
	rcv.failing.Store(true)
	dir := t.TempDir()
	addr := freeAddr(t)
	env := map[string]string{
		"HERALD_HTTP_ADDR":          addr,
		"HERALD_RELAY_INTERVAL":     "100ms",
		"HERALD_WEBHOOK_SECRET":     "whsec_" + base64.StdEncoding.EncodeToString(key),
		"HERALD_STATUS_WEBHOOK_URL": rcv.srv.URL + "/herald/status",
	}
	p := startHerald(t, dir, env, "serve")
	api := client{base: "http://" + addr}
	waitHTTP(t, api.base+"/healthz")

	const n = 10
	var ids []string
	for i := range n {
		r := api.create(t, fmt.Sprintf("s%d@example.com", i), nil)
		require.Equal(t, 201, r.Status, r.Body)
		ids = append(ids, r.ID)
	}
	// Delivered while the status endpoint fails: it holds up nothing.
	for _, id := range ids {
		require.Eventually(t, func() bool { return api.get(t, id).Status == "sent" }, 20*time.Second, 10*time.Millisecond,
			"notification %s not delivered while the status webhook fails", id)
	}
	require.Eventually(t, func() bool { return rcv.tries.Load() > 0 }, 20*time.Second, 10*time.Millisecond, "the status webhook was never tried")
	got, bad := rcv.snapshot()
	require.Empty(t, got, "accepted while failing")
	require.Empty(t, bad, "bad signatures")
	require.False(t, p.LogContains("relay stopped"), "a failing status webhook stopped a relay")

	rcv.failing.Store(false)
	require.Eventually(t, func() bool {
		got, _ := rcv.snapshot()
		return len(got) >= n
	}, 30*time.Second, 20*time.Millisecond, "the status events never all arrived after the recovery")
	got, bad = rcv.snapshot()
	require.Empty(t, bad)
	byNotification := map[string]string{}
	for id, b := range got {
		require.True(t, strings.HasPrefix(id, "evt_"), "webhook-id %q", id)
		require.Equal(t, "notification.sent", b.Type)
		require.Equal(t, "sent", b.Data.Status)
		require.Equal(t, "email", b.Data.Channel)
		_, dup := byNotification[b.Data.NotificationID]
		require.False(t, dup, "two events (two webhook-ids) for notification %s", b.Data.NotificationID)
		byNotification[b.Data.NotificationID] = id
	}
	for _, id := range ids {
		require.Contains(t, byNotification, id)
	}
	require.Len(t, got, n)
}

// HERALD_STATUS_WEBHOOK_URL without HERALD_WEBHOOK_SECRET fails at start,
// saying which setting is missing.
func TestStatusWebhookNeedsSecret(t *testing.T) {
	t.Parallel()
	p := startHerald(t, t.TempDir(), map[string]string{
		"HERALD_HTTP_ADDR":          freeAddr(t),
		"HERALD_STATUS_WEBHOOK_URL": "http://127.0.0.1:9/status",
	}, "serve")
	p.waitExit(30 * time.Second)
	require.Error(t, p.Err())
	require.True(t, p.LogContains("HERALD_STATUS_WEBHOOK_URL needs HERALD_WEBHOOK_SECRET"), p.Log())
}

// With a broker and HERALD_STATUS_WEBHOOK_URL, the relay process runs two
// relays: notifications are published and delivered while the status
// webhook answers 503; the status events reach a queue bound to
// notification.* at once, and the webhook once it recovers, every event
// confirmed (the outbox empties) only when both have it.
func TestStatusWebhookBesideRabbitMQ(t *testing.T) {
	t.Parallel()
	key := []byte("fedcba9876543210fedcba9876543210")
	rcv := startStatusReceiver(t, key)
	rcv.failing.Store(true)
	s := newStack(t, map[string]string{
		"HERALD_WEBHOOK_SECRET":     "whsec_" + base64.StdEncoding.EncodeToString(key),
		"HERALD_STATUS_WEBHOOK_URL": rcv.srv.URL + "/status",
	})
	s.startAPI(nil)
	relayProc := s.start("relay")

	const n = 5
	var ids []string
	for i := range n {
		r := s.api.create(t, fmt.Sprintf("w%d@example.com", i), nil)
		require.Equal(t, 201, r.Status, r.Body)
		ids = append(ids, r.ID)
	}
	s.waitTopology()
	ch := s.channel()
	q, err := ch.QueueDeclare("status-beside-webhook", true, false, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(q.Name, "notification.sent", "notifications", false, nil))
	s.start("worker")
	for _, id := range ids {
		s.waitStatus(id, "sent", 30*time.Second)
	}
	// The broker has every status event although the webhook fails.
	var got []string
	require.Eventually(t, func() bool {
		for _, d := range drain(t, ch, q.Name) {
			got = append(got, d.MessageId)
		}
		return len(got) >= n
	}, 30*time.Second, 20*time.Millisecond, "status events held back from the broker by the failing webhook")
	require.Eventually(t, func() bool { return rcv.tries.Load() > 0 }, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, n, s.count("SELECT count(*) FROM outbox WHERE processed_at IS NULL AND event_type = 'notification.sent'"),
		"a status event confirmed before the webhook had it")

	rcv.failing.Store(false)
	s.waitOutboxEmpty()
	accepted, bad := rcv.snapshot()
	require.Empty(t, bad)
	require.Len(t, accepted, n)
	for _, d := range drain(t, ch, q.Name) {
		got = append(got, d.MessageId)
	}
	require.Len(t, got, n, "the broker got a status event again while the webhook failed: %v", got)
	require.False(t, relayProc.LogContains("relay stopped"))
}

// outboxTypes lists the outbox rows of a SQLite file as "type processed"
// or "type unprocessed", in id order.
func outboxTypes(t *testing.T, path string) []string {
	t.Helper()
	var out []string
	for _, typ := range []string{"notification.requested", "notification.sent", "notification.failed"} {
		for _, state := range []string{"processed", "unprocessed"} {
			cond := "processed_at IS NOT NULL"
			if state == "unprocessed" {
				cond = "processed_at IS NULL"
			}
			for range sqliteCount(t, path, "SELECT count(*) FROM outbox WHERE event_type = ? AND "+cond, typ) {
				out = append(out, typ+" "+state)
			}
		}
	}
	return out
}

// The embedded mode with the default settings (HERALD_STATUS_EVENTS=auto,
// the outbox table, no status webhook): nobody could receive a status
// event, so a delivery writes none; the outbox holds the request only. A
// status event an earlier run left unprocessed is marked processed at
// start, so that it neither stays in the backlog nor escapes retention.
func TestStatusEventsNotWrittenWithoutADestination(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "herald.db")

	// The earlier run: a store that writes status events delivers one
	// notification, and nobody relays its event.
	ctx := t.Context()
	old, err := sqlite.Open(ctx, path, sqlite.Config{})
	require.NoError(t, err)
	require.NoError(t, old.Migrate(ctx))
	c, err := old.Create(ctx, notify.NewNotification{Request: notify.CreateRequest{
		UserID: "u0", Channel: notify.ChannelEmail, To: "old@example.com", Subject: "s", Body: "b"}})
	require.NoError(t, err)
	_, err = relay.Batch(ctx, old, 10, nil, func(_ context.Context, evs []notify.Event) ([]int64, error) {
		require.Len(t, evs, 1)
		out, err := deliverytest.Deliver(ctx, old, evs[0].ID, c.Notification.ID, func(context.Context) error { return nil })
		require.NoError(t, err)
		require.Equal(t, notify.OutcomeSent, out)
		return []int64{evs[0].ID}, nil
	})

	require.NoError(t, err)
	require.NoError(t, old.Close())
	require.Equal(t, []string{"notification.requested processed", "notification.sent unprocessed"}, outboxTypes(t, path))

	addr := freeAddr(t)
	p := startHerald(t, dir, map[string]string{"HERALD_HTTP_ADDR": addr, "HERALD_RELAY_INTERVAL": "100ms"}, "serve")
	api := client{base: "http://" + addr}
	waitHTTP(t, api.base+"/healthz")
	// The start-up record says the setting (read from the process's
	// output, which may trail its first answer).
	waitFor(t, 10*time.Second, 10*time.Millisecond, func() bool { return p.LogContains("HERALD_STATUS_EVENTS=auto") }, p.Log)
	waitFor(t, 20*time.Second, 10*time.Millisecond, func() bool {
		return sqliteCount(t, path, "SELECT count(*) FROM outbox WHERE processed_at IS NULL") == 0
	}, func() string {
		return fmt.Sprintf("the earlier run's status event is still unprocessed: %v", outboxTypes(t, path))
	})

	r := api.create(t, "new@example.com", nil)
	require.Equal(t, 201, r.Status, r.Body)
	require.Eventually(t, func() bool { return api.get(t, r.ID).Status == "sent" }, 20*time.Second, 5*time.Millisecond)
	// The record that settled it is committed, and wrote no status event:
	// the notification's one row is its request.
	require.Equal(t, 1, sqliteCount(t, path, "SELECT count(*) FROM outbox WHERE json_extract(payload, '$.notification_id') = ?", r.ID),
		"the new notification's rows: %v", outboxTypes(t, path))
	require.Equal(t, 1, sqliteCount(t, path, "SELECT count(*) FROM outbox WHERE event_type = 'notification.requested' AND json_extract(payload, '$.notification_id') = ?", r.ID))
	waitFor(t, 20*time.Second, 10*time.Millisecond, func() bool {
		return sqliteCount(t, path, "SELECT count(*) FROM outbox WHERE processed_at IS NULL") == 0
	}, func() string { return fmt.Sprintf("the request was never finished: %v", outboxTypes(t, path)) })
	require.Equal(t, []string{"notification.requested processed", "notification.requested processed", "notification.sent processed"}, outboxTypes(t, path))
}

// HERALD_STATUS_EVENTS=on on the outbox table without a status webhook: the
// status event is written with the settling, and marked processed at once
// by the workers' status relay.
func TestStatusEventsOnWithoutADestination(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "herald.db")
	addr := freeAddr(t)
	startHerald(t, dir, map[string]string{"HERALD_HTTP_ADDR": addr, "HERALD_RELAY_INTERVAL": "100ms", "HERALD_STATUS_EVENTS": "on"}, "serve")
	api := client{base: "http://" + addr}
	waitHTTP(t, api.base+"/healthz")

	r := api.create(t, "ann@example.com", nil)
	require.Equal(t, 201, r.Status, r.Body)
	require.Eventually(t, func() bool { return api.get(t, r.ID).Status == "sent" }, 20*time.Second, 5*time.Millisecond)
	require.Equal(t, 1, sqliteCount(t, path, "SELECT count(*) FROM outbox WHERE event_type = 'notification.sent' AND json_extract(payload, '$.notification_id') = ?", r.ID),
		"no status event: %v", outboxTypes(t, path))
	waitFor(t, 20*time.Second, 10*time.Millisecond, func() bool {
		return sqliteCount(t, path, "SELECT count(*) FROM outbox WHERE processed_at IS NULL") == 0
	}, func() string { return fmt.Sprintf("not every row was processed: %v", outboxTypes(t, path)) })
	require.Equal(t, []string{"notification.requested processed", "notification.sent processed"}, outboxTypes(t, path))
}

// HERALD_STATUS_EVENTS=off with HERALD_STATUS_WEBHOOK_URL is a usage error
// at start, whatever the transport: the webhook would never get an event.
func TestStatusEventsOffRefusesStatusWebhook(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"serve", "worker"} {
		dir := t.TempDir()
		code, out := runBin(t, dir, map[string]string{
			"HERALD_DATABASE_URL":       "sqlite:" + filepath.Join(dir, "herald.db"),
			"HERALD_HTTP_ADDR":          freeAddr(t),
			"HERALD_SMTP_URL":           "mbox:herald.mbox",
			"HERALD_STATUS_EVENTS":      "off",
			"HERALD_WEBHOOK_SECRET":     "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")),
			"HERALD_STATUS_WEBHOOK_URL": "http://127.0.0.1:9/status",
		}, cmd)
		require.Equal(t, 2, code, "%s: %s", cmd, out)
		require.Contains(t, out, "HERALD_STATUS_EVENTS=off writes no status events, so HERALD_STATUS_WEBHOOK_URL would never receive one", cmd)
		require.NoFileExists(t, filepath.Join(dir, "herald.db"), "%s opened the database before refusing", cmd)
	}
}
