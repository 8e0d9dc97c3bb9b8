package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Exercise: the fault header fails the create after the outbox INSERT,
// inside the transaction; neither row exists afterwards.
func TestFaultHeaderLeavesNoRows(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	p := s.startAPI(map[string]string{"HERALD_DEBUG_FAULTS": "1"})
	// Fault injection never starts in silence.
	p.requireLog("level=WARN msg=\"HERALD_DEBUG_FAULTS=1: fault injection is on")

	r := s.api.create(t, "a@example.com", map[string]string{"X-Herald-Fault": "after-outbox-insert"})
	require.Equal(t, 500, r.Status, r.Body)
	require.Zero(t, s.count("SELECT count(*) FROM notifications"))
	require.Zero(t, s.count("SELECT count(*) FROM outbox"))

	// Without the header the same create commits both rows.
	r = s.api.create(t, "a@example.com", nil)
	require.Equal(t, 201, r.Status, r.Body)
	require.Equal(t, 1, s.count("SELECT count(*) FROM notifications"))
	require.Equal(t, 1, s.count("SELECT count(*) FROM outbox WHERE payload->>'notification_id' = $1", r.ID))
}

// The whole production path: api -> outbox -> relay -> RabbitMQ -> worker ->
// SMTP, with the Message-ID of the contract and the body intact.
func TestDeliveredEndToEnd(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	s.startAPI(nil)
	s.start("relay")
	s.start("worker")

	r := s.api.create(t, "Someone <b@example.com>", nil)
	require.Equal(t, 201, r.Status, r.Body)
	n := s.waitStatus(r.ID, "sent", 30*time.Second)
	require.Equal(t, 1, n.Attempts)
	msgs := s.smtp.Messages()
	require.Len(t, msgs, 1)
	require.Equal(t, "<"+r.ID+"@example.com>", msgs[0].MessageID)
	require.Equal(t, []string{"b@example.com"}, msgs[0].To)
	require.Equal(t, strings.ReplaceAll(testBody, "\n", "\r\n"), msgs[0].Body, "the body arrives intact")
	s.waitOutboxEmpty()
	require.Equal(t, 1, s.count("SELECT count(*) FROM processed_messages"))
}

// Exercise: with the SMTP server refusing the message for now (451 to RCPT
// on every try), 1 + HERALD_MAX_RETRIES attempts HERALD_RETRY_DELAY apart,
// then one dead letter carrying x-retry-count 5 and the reason, and status
// failed. (A server that cannot be reached at all is a failure of the
// server, not of the message: it spends no retry; see the outage tests.)
func TestRetriesThenDeadLetter(t *testing.T) {
	t.Parallel()
	s := newStack(t, map[string]string{"HERALD_RETRY_DELAY": "1s"})
	s.smtp.Fail(451, "4.3.0 mailbox temporarily unavailable")
	s.startAPI(nil)
	s.start("relay")
	s.start("worker")

	r := s.api.create(t, "c@example.com", nil)
	require.Equal(t, 201, r.Status, r.Body)
	n := s.waitStatus(r.ID, "failed", 60*time.Second)
	require.Equal(t, 6, n.Attempts, "1 attempt + 5 retries")
	require.NotNil(t, n.LastError)
	require.NotEmpty(t, *n.LastError)

	ch := s.channel()
	var dead []string
	require.Eventually(t, func() bool {
		for _, d := range drain(t, ch, "notifications.send.dlq") {
			require.EqualValues(t, 5, d.Headers["x-retry-count"])
			require.NotEmpty(t, d.Headers["x-last-error"])
			dead = append(dead, d.MessageId)
		}
		return len(dead) >= 1
	}, 10*time.Second, 20*time.Millisecond)
	require.Len(t, dead, 1)
	require.Empty(t, drain(t, ch, "notifications.retry"))
	require.Empty(t, drain(t, ch, "notifications.send"))
}

// Exercise: the same event published twice with one message_id is applied
// once: one email, one processed_messages row, the copy acknowledged.
func TestDuplicatePublishAppliedOnce(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	s.startAPI(nil)
	metrics := freeAddr(t)
	s.startWith(map[string]string{"HERALD_METRICS_ADDR": metrics}, "worker")
	waitHTTP(t, "http://"+metrics+"/metrics")
	s.waitTopology()

	// No relay runs: the test publishes the outbox event itself, twice.
	r := s.api.create(t, "d@example.com", nil)
	require.Equal(t, 201, r.Status, r.Body)
	id, payload := outboxRow(t, s.db, r.ID)
	ch := s.channel()
	publish(t, ch, id, payload)
	publish(t, ch, id, payload)

	s.waitStatus(r.ID, "sent", 30*time.Second)
	require.Eventually(t, func() bool {
		return scrape(t, "http://"+metrics+"/metrics", `herald_worker_deliveries_total{channel="email",outcome="duplicate"}`) == 1
	}, 30*time.Second, 20*time.Millisecond, "the second copy was never absorbed")
	require.Equal(t, 1, s.smtp.CountByMessageID()["<"+r.ID+"@example.com>"])
	require.Equal(t, 1, s.smtp.Count())
	require.Equal(t, 1, s.count("SELECT count(*) FROM processed_messages WHERE message_id = $1", id))
}

// Exercise: a worker killed after its commit and before its ack. The
// redelivery changes nothing.
func TestWorkerKilledAfterCommit(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	s.startAPI(nil)
	s.start("relay")
	w := s.startWith(map[string]string{"HERALD_DEBUG_FAULTS": "1", "HERALD_DEBUG_CRASH": "after-commit"}, "worker")

	r := s.api.create(t, "e@example.com", nil)
	require.Equal(t, 201, r.Status, r.Body)
	w.waitExit(30 * time.Second)
	require.Equal(t, "sent", s.api.get(t, r.ID).Status, "the commit happened before the kill")
	require.Equal(t, 1, s.smtp.Count())

	metrics := freeAddr(t)
	s.startWith(map[string]string{"HERALD_METRICS_ADDR": metrics}, "worker")
	require.Eventually(t, func() bool {
		return scrape(t, "http://"+metrics+"/metrics", `herald_worker_deliveries_total{channel="email",outcome="duplicate"}`) == 1
	}, 30*time.Second, 20*time.Millisecond, "the unacked message was never redelivered")
	require.Equal(t, 1, s.smtp.Count(), "the redelivery sent nothing")
	require.Equal(t, 1, s.count("SELECT count(*) FROM processed_messages"))
	require.Equal(t, "sent", s.api.get(t, r.ID).Status)
}

// The one window no system closes: a worker killed after the SMTP server
// accepted the mail and before its commit sends it again on redelivery,
// with the same Message-ID, so the repeat is detectable downstream.
func TestWorkerKilledAfterSendRepeatsWithSameMessageID(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	s.startAPI(nil)
	s.start("relay")
	// A short send timeout makes the claim's lease (timeout + 15s) run out
	// within the test.
	short := map[string]string{"HERALD_SMTP_TIMEOUT": "2s"}
	w := s.startWith(map[string]string{"HERALD_DEBUG_FAULTS": "1", "HERALD_DEBUG_CRASH": "after-send", "HERALD_SMTP_TIMEOUT": "2s"}, "worker")

	r := s.api.create(t, "f@example.com", nil)
	require.Equal(t, 201, r.Status, r.Body)
	w.waitExit(30 * time.Second)
	require.Equal(t, "pending", s.api.get(t, r.ID).Status, "the kill came before the commit")
	require.Zero(t, s.count("SELECT count(*) FROM processed_messages WHERE processed_at IS NOT NULL"))
	require.Equal(t, 1, s.count("SELECT count(*) FROM processed_messages WHERE processed_at IS NULL"), "the dead worker's claim")

	// The redelivery waits for the dead worker's lease, then takes it over.
	s.startWith(short, "worker")
	s.waitStatus(r.ID, "sent", 45*time.Second)
	require.Equal(t, map[string]int{"<" + r.ID + "@example.com>": 2}, s.smtp.CountByMessageID())
	require.Equal(t, 1, s.count("SELECT count(*) FROM processed_messages"))
	require.Equal(t, 1, s.count("SELECT count(*) FROM processed_messages WHERE processed_at IS NOT NULL"))
	// Both sends are in the history: the dead worker's, never finished,
	// and the one that was recorded.
	require.Equal(t, 2, s.count("SELECT count(*) FROM delivery_attempts WHERE notification_id = $1", r.ID))
	require.Equal(t, 1, s.count("SELECT count(*) FROM delivery_attempts WHERE notification_id = $1 AND outcome = 'sent'", r.ID))
}

// Exercise: two relays against one backlog publish every row exactly once.
func TestTwoRelaysPublishEachRowOnce(t *testing.T) {
	t.Parallel()
	const n = 400
	s := newStack(t, map[string]string{"HERALD_RELAY_BATCH": "10"})
	s.startAPI(nil)
	ids := createMany(t, s.api, n, 8)
	require.Len(t, ids, n)
	require.Equal(t, n, s.count("SELECT count(*) FROM outbox WHERE processed_at IS NULL"))

	s.start("relay")
	s.start("relay")
	require.Eventually(t, func() bool {
		return s.count("SELECT count(*) FROM outbox WHERE processed_at IS NULL") == 0
	}, 60*time.Second, 20*time.Millisecond)

	ch := s.channel()
	seen := map[string]int{}
	for _, d := range drain(t, ch, "notifications.send") {
		seen[d.MessageId]++
	}
	require.Len(t, seen, n, "every row published")
	for id, c := range seen {
		require.Equal(t, 1, c, "outbox row %s published %d times", id, c)
	}
}

// createMany creates n notifications from c concurrent clients and returns
// their ids; every create must answer 201.
func createMany(t *testing.T, api client, n, c int) []string {
	t.Helper()
	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	next := make(chan int)
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r := api.create(t, fmt.Sprintf("user%d@example.com", i), nil)
				if r.Status != 201 {
					t.Errorf("create %d: %d %s", i, r.Status, r.Body)
					continue
				}
				mu.Lock()
				ids = append(ids, r.ID)
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return ids
}

// outboxRow reads the outbox event of a notification.
func outboxRow(t *testing.T, dbURL, notificationID string) (int64, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var id int64
	var payload []byte
	require.NoError(t, conn.QueryRow(ctx,
		"SELECT id, payload::text FROM outbox WHERE payload->>'notification_id' = $1 AND event_type = 'notification.requested'", notificationID).Scan(&id, &payload))
	return id, payload
}
