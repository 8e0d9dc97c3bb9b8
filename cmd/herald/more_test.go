package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/smtptest"
)

// Production without a broker: herald api plus two workers claiming from the
// PostgreSQL outbox, no relay. Every notification is sent exactly once.
func TestTableTransportOnPostgres(t *testing.T) {
	t.Parallel()
	const n = 200
	s := newStack(t, map[string]string{"HERALD_BROKER_URL": ""})
	s.startAPI(nil)
	s.start("worker")
	s.start("worker")

	ids := createMany(t, s.api, n, 8)
	require.Len(t, ids, n)
	require.Eventually(t, func() bool {
		return s.count("SELECT count(*) FROM notifications WHERE status = 'sent'") == n
	}, 60*time.Second, 20*time.Millisecond)
	byID := s.smtp.CountByMessageID()
	require.Len(t, byID, n)
	for _, id := range ids {
		require.Equal(t, 1, byID["<"+id+"@example.com>"], "notification %s", id)
	}
	s.waitOutboxEmpty()
}

// Poison on the queue (not JSON, an unknown type, missing fields) goes to
// the dead letters at once with its reason; the messages around it are
// delivered as usual.
func TestPoisonMessagesDeadLetteredAtOnce(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	s.startAPI(nil)
	s.start("relay")
	s.start("worker")
	s.waitTopology()
	ch := s.channel()

	before := s.api.create(t, "before@example.com", nil)
	publish(t, ch, 9_000_000_001, []byte(`this is not JSON`))
	publishTyped(t, ch, 9_000_000_002, "order.created", []byte(`{}`))
	// Names no notification that exists: a poison message naming a
	// pending one fails it (issue 11, defect 6), which is not this test.
	publish(t, ch, 9_000_000_003, []byte(`{"notification_id":"987654321"}`))
	after := s.api.create(t, "after@example.com", nil)

	s.waitStatus(before.ID, "sent", 30*time.Second)
	s.waitStatus(after.ID, "sent", 30*time.Second)
	reasons := map[string]string{}
	require.Eventually(t, func() bool {
		for _, d := range drain(t, ch, "notifications.send.dlq") {
			reasons[d.MessageId] = fmt.Sprint(d.Headers["x-last-error"])
			require.EqualValues(t, 0, d.Headers["x-retry-count"], "poison is never retried")
		}
		return len(reasons) == 3
	}, 30*time.Second, 20*time.Millisecond)
	require.Contains(t, reasons["9000000001"], "decode payload")
	require.Contains(t, reasons["9000000002"], "unknown event type")
	require.Contains(t, reasons["9000000003"], "payload")
	require.Equal(t, 2, s.smtp.Count())
	require.Zero(t, s.count("SELECT count(*) FROM notifications WHERE status = 'failed'"))
}

// Dead letters on the embedded default: SQLite, the table transport, dlq
// list and redrive against the same file.
func TestEmbeddedDeadLetterRedrive(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	smtp := smtptest.Start(t)
	addr := freeAddr(t)
	env := map[string]string{"HERALD_HTTP_ADDR": addr, "HERALD_SMTP_URL": smtp.URL(), "HERALD_RETRY_DELAY": "200ms", "HERALD_MAX_RETRIES": "1"}
	startHerald(t, dir, env, "serve")
	api := client{base: "http://" + addr}
	waitHTTP(t, api.base+"/healthz")

	smtp.Fail(451, "try later")
	r := api.create(t, "dl@example.com", nil)
	require.Equal(t, 201, r.Status, r.Body)
	require.Eventually(t, func() bool { return api.get(t, r.ID).Status == "failed" }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, 2, api.get(t, r.ID).Attempts, "1 attempt + HERALD_MAX_RETRIES=1")

	cli := func(args ...string) string {
		p := startHerald(t, dir, nil, args...)
		p.waitExit(60 * time.Second)
		require.NoError(t, p.Err(), p.Log())
		return p.Log()
	}
	out := cli("dlq", "list", "--json")
	var page struct {
		Items []map[string]any `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(out[:strings.LastIndex(out, "}")+1]), &page), out)
	listed := page.Items
	require.Len(t, listed, 1)
	require.Equal(t, r.ID, listed[0]["id"])
	require.Contains(t, listed[0]["last_error"], "451")
	require.Contains(t, cli("dlq", "show", r.ID), "failed")

	// Over HTTP too: a dry run changes nothing.
	resp := api.raw(t, "POST", "/dead-letters/redrive", `{"ids":["`+r.ID+`"],"dry_run":true}`)
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "failed", api.get(t, r.ID).Status)
	require.Equal(t, 400, api.raw(t, "POST", "/dead-letters/redrive", `{}`).StatusCode, "an empty selection is refused")

	smtp.Fail(0, "")
	require.Contains(t, cli("dlq", "redrive", "--all"), "redrove 1 of 1")
	require.Eventually(t, func() bool { return api.get(t, r.ID).Status == "sent" }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, smtp.Count())
	require.FileExists(t, filepath.Join(dir, "herald.db"))
}
