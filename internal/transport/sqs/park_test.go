package sqs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/sqstest"
	"github.com/heraldhq/herald/internal/testkit/testenv"
	sqstr "github.com/heraldhq/herald/internal/transport/sqs"
)

// fifoConfig is config on FIFO queues.
func fifoConfig(t *testing.T) sqstr.Config {
	t.Helper()
	srv := sqstest.Start(t)
	cfg, err := sqstr.ParseURL(srv.BrokerURL(sqstest.Prefix(t), true))
	require.NoError(t, err)
	cfg.WaitTime = time.Second
	cfg.ReconnectMin = 20 * time.Millisecond
	cfg.ReconnectMax = 200 * time.Millisecond
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, sqstr.Delete(ctx, cfg))
	})
	return cfg
}

// userEvents returns one event per user given, ids from 1, in that order.
func userEvents(users ...string) []notify.Event {
	at := time.Now().UTC().Truncate(time.Microsecond)
	evs := make([]notify.Event, len(users))
	for i, u := range users {
		id := int64(i + 1)
		payload, _ := json.Marshal(notify.Requested{
			NotificationID: notify.FormatID(id), UserID: u, Channel: notify.ChannelEmail,
			To: "someone@example.com", Subject: fmt.Sprintf("Hello %d", id), Body: "body",
		})
		evs[i] = notify.Event{ID: id, Type: notify.EventRequested, Payload: payload, OccurredAt: at}
	}
	return evs
}

// record is what a test handler saw of one delivery.
type record struct {
	id      int64
	retries int
	at      time.Time
}

// log is the deliveries and acknowledgements a handler saw, in order.
type log struct {
	mu         sync.Mutex
	deliveries []record
	acks       []int64
}

func (l *log) delivered(m notify.Message) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deliveries = append(l.deliveries, record{id: m.ID, retries: m.RetryCount, at: time.Now()})
	n := 0
	for _, r := range l.deliveries {
		if r.id == m.ID {
			n++
		}
	}
	return n
}

func (l *log) acked(id int64) {
	l.mu.Lock()
	l.acks = append(l.acks, id)
	l.mu.Unlock()
}

func (l *log) ackCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acks)
}

func (l *log) of(id int64) []record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []record
	for _, r := range l.deliveries {
		if r.id == id {
			out = append(out, r)
		}
	}
	return out
}

// TestStandardPark: a parked message on a standard queue comes back no
// sooner than its wait, with its retry count and reason, however often it
// is parked: the redrive policy (maxReceiveCount 2 here) never counts a
// park, so it never reaches the DLQ while pending.
func TestStandardPark(t *testing.T) {
	cfg := config(t)
	cfg.MaxReceiveCount = 2
	cfg.VisibilityTimeout = 30 * time.Second // nothing comes back by its visibility here
	cfg.RetryDelays = []time.Duration{time.Second}
	_, err := newPublisher(t, cfg).Publish(t.Context(), testEvents(1, ""))
	require.NoError(t, err)

	const parks = 4
	const after = 1500 * time.Millisecond // SQS delays whole seconds: 2s
	var l log
	var mu sync.Mutex
	var parkedAt []time.Time
	consume(t, cfg, func(ctx context.Context, d notify.Delivery) {
		n := l.delivered(d.Message())
		switch {
		case n == 1:
			assert.NoError(t, d.Retry(ctx, "451 later"))
		case n <= 1+parks:
			mu.Lock()
			parkedAt = append(parkedAt, time.Now())
			mu.Unlock()
			assert.NoError(t, d.Release(ctx, after))
		default:
			if assert.NoError(t, d.Ack(ctx)) {
				l.acked(d.Message().ID)
			}
		}
	})
	require.Eventually(t, func() bool { return l.ackCount() == 1 }, time.Minute, tick, "the parked message was never acknowledged")
	require.Empty(t, peek(t, cfg), "a parked message reached the DLQ")

	got := l.of(1)
	require.Len(t, got, 2+parks, "deliveries")
	mu.Lock()
	defer mu.Unlock()
	for i, r := range got[1:] {
		require.Equal(t, 1, r.retries, "delivery %d lost or counted a retry", i+2)
		if i > 0 {
			require.GreaterOrEqual(t, testenv.Waited(parkedAt[i-1], r.at), testenv.NotBefore(after), "park %d came back before its wait", i)
		}
	}
	require.Never(t, func() bool { return len(l.of(1)) > 2+parks }, 2*time.Second, tick, "an acknowledged message came back")
}

// TestFIFORetryDelivered: a FIFO retry copy is handed to the handler
// after its delay, with its retry count, once.
func TestFIFORetryDelivered(t *testing.T) {
	cfg := fifoConfig(t)
	cfg.RetryDelays = []time.Duration{time.Second}
	_, err := newPublisher(t, cfg).Publish(t.Context(), userEvents("u"))
	require.NoError(t, err)

	var l log
	var retried time.Time
	var mu sync.Mutex
	consume(t, cfg, func(ctx context.Context, d notify.Delivery) {
		if l.delivered(d.Message()) == 1 {
			mu.Lock()
			retried = time.Now()
			mu.Unlock()
			assert.NoError(t, d.Retry(ctx, "451 later"))
			return
		}
		if assert.NoError(t, d.Ack(ctx)) {
			l.acked(d.Message().ID)
		}
	})
	require.Eventually(t, func() bool { return l.ackCount() == 1 }, wait, tick, "the retry copy was never handed over")
	got := l.of(1)
	require.Len(t, got, 2)
	require.Equal(t, 1, got[1].retries)
	mu.Lock()
	require.GreaterOrEqual(t, testenv.Waited(retried, got[1].at), testenv.NotBefore(time.Second), "the retry came before its delay")
	mu.Unlock()
	require.Never(t, func() bool { return len(l.of(1)) > 2 }, 2*time.Second, tick, "an acknowledged retry came back")
	require.Empty(t, peek(t, cfg))
}

// TestFIFOGroupOrder: ten messages of one user, interleaved with ten of
// another, reach the handler in order, one at a time per user, although
// the handler takes twenty at once and the earlier ones take longer; the
// two users are handled side by side.
func TestFIFOGroupOrder(t *testing.T) {
	cfg := fifoConfig(t)
	cfg.Prefetch = 20
	var users []string
	for range 10 {
		users = append(users, "u", "v")
	}
	evs := userEvents(users...)
	_, err := newPublisher(t, cfg).Publish(t.Context(), evs)
	require.NoError(t, err)

	var (
		mu          sync.Mutex
		order       = map[string][]int64{}
		running     = map[string]int{}
		mostInGroup int
		most, now   int
	)
	consume(t, cfg, func(ctx context.Context, d notify.Delivery) {
		m := d.Message()
		user := users[m.ID-1]
		mu.Lock()
		running[user]++
		now++
		mostInGroup = max(mostInGroup, running[user])
		most = max(most, now)
		mu.Unlock()
		// The send's duration: earlier messages take longer, so that
		// messages handed over together would settle out of order.
		select {
		case <-time.After(time.Duration(21-m.ID) * 10 * time.Millisecond):
		case <-ctx.Done():
		}
		mu.Lock()
		running[user]--
		now--
		mu.Unlock()
		if assert.NoError(t, d.Ack(ctx)) {
			mu.Lock()
			order[user] = append(order[user], m.ID)
			mu.Unlock()
		}
	})
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order["u"])+len(order["v"]) == 20
	}, wait, tick)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int64{1, 3, 5, 7, 9, 11, 13, 15, 17, 19}, order["u"], "user u's order")
	require.Equal(t, []int64{2, 4, 6, 8, 10, 12, 14, 16, 18, 20}, order["v"], "user v's order")
	require.Equal(t, 1, mostInGroup, "two messages of one user in the handler at once")
	require.Greater(t, most, 1, "the two users were not handled side by side")
}

// TestFIFOPark: a FIFO message parked again and again (more often than
// maxReceiveCount, 4 here) comes back each time no sooner than its wait,
// unchanged, never reaches the DLQ, and keeps its place: its user's later
// messages are handed over only after it, while another user's go on
// meanwhile.
func TestFIFOPark(t *testing.T) {
	cfg := fifoConfig(t)
	cfg.MaxReceiveCount = 4
	cfg.VisibilityTimeout = 30 * time.Second // nothing comes back by its visibility here
	cfg.Prefetch = 10
	users := []string{"u", "u", "v", "u", "v", "u", "v", "u"}
	_, err := newPublisher(t, cfg).Publish(t.Context(), userEvents(users...))
	require.NoError(t, err)

	const parks = 6
	const after = time.Second
	var l log
	var mu sync.Mutex
	var parkedAt []time.Time
	consume(t, cfg, func(ctx context.Context, d notify.Delivery) {
		m := d.Message()
		if l.delivered(m) <= parks && m.ID == 1 {
			mu.Lock()
			parkedAt = append(parkedAt, time.Now())
			mu.Unlock()
			assert.NoError(t, d.Release(ctx, after))
			return
		}
		if assert.NoError(t, d.Ack(ctx)) {
			l.acked(m.ID)
		}
	})
	require.Eventually(t, func() bool { return l.ackCount() == len(users) }, time.Minute, tick, "not every message was acknowledged")
	require.Empty(t, peek(t, cfg), "a message reached the DLQ")

	l.mu.Lock()
	var u, v []int64
	u1At := -1
	for i, id := range l.acks {
		if id == 1 {
			u1At = i
		}
		if users[id-1] == "u" {
			u = append(u, id)
		} else {
			v = append(v, id)
		}
	}
	l.mu.Unlock()
	require.Equal(t, []int64{1, 2, 4, 6, 8}, u, "user u's order")
	require.Equal(t, []int64{3, 5, 7}, v, "user v's order")
	require.Equal(t, 3, u1At, "user v's messages waited for user u's parked one")

	got := l.of(1)
	require.Len(t, got, parks+1)
	mu.Lock()
	defer mu.Unlock()
	for i, r := range got {
		require.Equal(t, 0, r.retries, "delivery %d counted a retry", i+1)
		if i > 0 {
			require.GreaterOrEqual(t, testenv.Waited(parkedAt[i-1], r.at), testenv.NotBefore(after), "park %d came back before its wait", i)
		}
	}
	for _, id := range []int64{2, 4, 6, 8} {
		require.Len(t, l.of(id), 1, "message %d was handed over while its user's first was parked", id)
	}
}

// TestFIFOParkMovesBehindWholeGroup: a FIFO park that must send the
// message to the end of its group (its receipts near half of
// maxReceiveCount) keeps its place although the receive that brought it
// left some of its group in the queue (Prefetch 2: a receive takes two):
// the user's later messages, received or not, are handed over only after
// it, in order.
func TestFIFOParkMovesBehindWholeGroup(t *testing.T) {
	cfg := fifoConfig(t)
	cfg.MaxReceiveCount = 4 // the second receipt's park moves the message
	cfg.VisibilityTimeout = 30 * time.Second
	cfg.Prefetch = 2
	users := []string{"u", "u", "u", "u", "u"}
	_, err := newPublisher(t, cfg).Publish(t.Context(), userEvents(users...))
	require.NoError(t, err)

	const parks = 3 // in place, moved, in place (the copy's hold served)
	var l log
	consume(t, cfg, func(ctx context.Context, d notify.Delivery) {
		m := d.Message()
		if l.delivered(m) <= parks && m.ID == 1 {
			assert.NoError(t, d.Release(ctx, time.Second))
			return
		}
		if assert.NoError(t, d.Ack(ctx)) {
			l.acked(m.ID)
		}
	})
	require.Eventually(t, func() bool { return l.ackCount() == len(users) }, time.Minute, tick, "not every message was acknowledged")
	l.mu.Lock()
	acks := append([]int64(nil), l.acks...)
	l.mu.Unlock()
	require.Equal(t, []int64{1, 2, 3, 4, 5}, acks, "user u's order")
	for _, id := range []int64{2, 3, 4, 5} {
		require.Len(t, l.of(id), 1, "message %d was handed over while its user's first was parked", id)
	}
	require.Empty(t, peek(t, cfg), "a message reached the DLQ")
}
