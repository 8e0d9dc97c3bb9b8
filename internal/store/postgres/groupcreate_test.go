package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/group"
)

func groupRequest(i int) notify.NewNotification {
	return notify.NewNotification{Request: notify.CreateRequest{
		UserID:  fmt.Sprintf("group-user-%d", i),
		Channel: notify.ChannelEmail,
		To:      fmt.Sprintf("r%d@example.com", i),
		Subject: fmt.Sprintf("subject %d", i),
		Body:    fmt.Sprintf("body %d", i),
	}, Traceparent: fmt.Sprintf("00-%032x-%016x-01", i+1, i+1)}
}

// checkEvents checks that every notification answered has exactly one
// event, and that the event's payload is the notification's own: the
// group's answer maps each request to its row.
func checkEvents(t *testing.T, s *Store, want map[int64]notify.NewNotification) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT n.id, n.user_id, n.recipient, n.subject, n.body, o.payload, COALESCE(o.traceparent, '')
FROM notifications AS n JOIN outbox AS o ON (o.payload->>'notification_id')::bigint = n.id
WHERE o.event_type = $1 ORDER BY n.id`, notify.EventRequested)
	require.NoError(t, err)
	defer rows.Close()
	seen := map[int64]bool{}
	for rows.Next() {
		var (
			id                             int64
			user, to, subject, body, trace string
			payload                        []byte
		)
		require.NoError(t, rows.Scan(&id, &user, &to, &subject, &body, &payload, &trace))
		nn, ok := want[id]
		require.True(t, ok, "notification %d was not answered to any create", id)
		require.False(t, seen[id], "notification %d has two events", id)
		seen[id] = true
		r := nn.Request
		assert.Equal(t, []string{r.UserID, r.To, r.Subject, r.Body, nn.Traceparent}, []string{user, to, subject, body, trace}, "notification %d", id)
		var ev struct {
			NotificationID string `json:"notification_id"`
			UserID         string `json:"user_id"`
			To             string `json:"to"`
			Subject        string `json:"subject"`
		}
		require.NoError(t, json.Unmarshal(payload, &ev))
		assert.Equal(t, []string{notify.FormatID(id), r.UserID, r.To, r.Subject}, []string{ev.NotificationID, ev.UserID, ev.To, ev.Subject}, "event of notification %d", id)
	}
	require.NoError(t, rows.Err())
	assert.Len(t, seen, len(want), "notifications with an event")
}

// Creates made at once share groups (one statement, one commit each) and
// every caller gets its own notification with its own event.
func TestGroupedCreatesAnswerEachCaller(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const clients, each = 16, 25
	var (
		mu   sync.Mutex
		want = map[int64]notify.NewNotification{}
		wg   sync.WaitGroup
	)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				nn := groupRequest(c*each + i)
				got, err := s.Create(ctx, nn)
				if !assert.NoError(t, err) {
					return
				}
				assert.Equal(t, nn.Request.Subject, got.Notification.Subject)
				assert.Equal(t, notify.StatusPending, got.Notification.Status)
				mu.Lock()
				_, dup := want[got.Notification.ID]
				want[got.Notification.ID] = nn
				mu.Unlock()
				assert.False(t, dup, "id %d answered twice", got.Notification.ID)
			}
		}()
	}
	wg.Wait()
	require.Len(t, want, clients*each)
	checkEvents(t, s, want)
	// Rows written by one transaction share its id (xmin): fewer
	// transactions than creates means that groups formed.
	txs := count(t, s, `SELECT count(DISTINCT xmin::text) FROM notifications`)
	t.Logf("%d creates from %d clients committed in %d transactions", clients*each, clients, txs)
	assert.Less(t, txs, clients*each, "no two creates shared a commit")
}

// A group the server refuses commits nothing, and each of its creates is
// retried alone: only the bad one fails. A create whose caller left before
// its group ran is not written.
func TestGroupRefusedFailsOnlyTheBadCreate(t *testing.T) {
	t.Parallel()
	s := setup(t)
	gone, cancelGone := context.WithCancel(t.Context())
	cancelGone()
	bad := groupRequest(1)
	bad.Request.Body = "a NUL byte \x00 PostgreSQL refuses in text"
	ins := []struct {
		ctx context.Context
		nn  notify.NewNotification
	}{{t.Context(), groupRequest(0)}, {t.Context(), bad}, {gone, groupRequest(2)}, {t.Context(), groupRequest(3)}}
	reqs := make([]createReq, len(ins))
	answers := make([]<-chan group.Result[notify.Created], len(ins))
	for i, in := range ins {
		reqs[i], answers[i] = group.NewRequest[notify.NewNotification, notify.Created](in.ctx, in.nn)
	}
	s.runGroup(reqs)

	want := map[int64]notify.NewNotification{}
	for i, answer := range answers {
		select {
		case r := <-answer:
			switch i {
			case 1:
				require.Error(t, r.Err, "the bad create")
				assert.NotErrorIs(t, r.Err, notify.ErrUnavailable)
			case 2:
				require.ErrorIs(t, r.Err, context.Canceled, "the create whose caller left")
			default:
				require.NoError(t, r.Err, "create %d", i)
				want[r.Out.Notification.ID] = ins[i].nn
			}
		default:
			t.Fatalf("create %d got no answer", i)
		}
	}
	checkEvents(t, s, want)
	assert.Equal(t, 2, count(t, s, `SELECT count(*) FROM notifications`))
}

// A database that accepts the connection and never answers: a create
// leaves when its context ends, and Close does not wait for the group's
// own timeout.
func TestGroupedCreateAgainstHungDatabase(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() }) // held open, never answered
		}
	}()
	s, err := Open(t.Context(), "postgres://postgres@"+ln.Addr().String()+"/herald?sslmode=disable", Config{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.Create(ctx, groupRequest(0))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), createGroupTimeout/2, "the create waited for the group's timeout, not its own")
	start = time.Now()
	s.Close()
	assert.Less(t, time.Since(start), createGroupTimeout/2, "Close waited for the hung group's timeout")
}
