package main

import (
	"net/http"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// The chapter's exercise 4 as docs/exercises.md words it, step by step and in
// order, on a fresh database and vhost (issue 38): the production stack
// started with the defaults (api, relay, worker: the retry queue declared
// with 30 s), then the worker alone moved to HERALD_RETRY_DELAY=1s. The
// relay runs with the default throughout, restarted included: the retry
// schedule is the workers'.
func TestExerciseRetriesThenDeadLetter(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	s.startAPI(nil)
	relay := s.start("relay")
	worker := s.start("worker")
	s.waitTopology()
	relay.requireLog("broker names declared")
	worker.requireLog("broker names declared")

	// Step 1: stop the stack's worker. Skipping the delete, a worker with
	// another delay refuses to start and says why and how to fix it.
	require.NoError(t, worker.Stop(30*time.Second))
	require.NoError(t, worker.Err(), "a stop on SIGTERM exits 0")
	refused := s.startWith(map[string]string{"HERALD_RETRY_DELAY": "1s"}, "worker")
	refused.waitExit(60 * time.Second)
	require.Error(t, refused.Err())
	for _, want := range []string{`queue "notifications.retry"`, "x-message-ttl 30000 (30s)", "HERALD_RETRY_DELAY=30s", "rabbitmqctl delete_queue"} {
		require.Contains(t, refused.Log(), want)
	}
	// The delete (rabbitmqctl delete_queue does AMQP's queue.delete).
	ch := s.channel()
	_, err := ch.QueueDelete("notifications.retry", false, false, false)
	require.NoError(t, err)

	// Step 2: an SMTP server that answers every RCPT TO with 451, and the
	// worker with the 1 s delay. The api and the relay keep running with
	// the default, and a relay restarted with it starts (it exited 1 on the
	// retry queue's arguments before the relay stopped declaring them).
	s.smtp.Fail(451, "4.3.0 try later")
	s.startWith(map[string]string{"HERALD_RETRY_DELAY": "1s"}, "worker").requireLog("broker names declared")
	require.NoError(t, relay.Stop(30*time.Second))
	relay = s.start("relay")
	relay.requireLog("broker names declared")

	// Step 3: one notification, seen passing through notifications.retry,
	// then in notifications.send.dlq.
	r := s.api.create(t, "ann@example.com", nil)
	require.Equal(t, http.StatusCreated, r.Status, r.Body)
	watch := s.channel()
	seenRetry := false
	n := s.waitStatusWhile(r.ID, "failed", 60*time.Second, func() {
		if q, err := watch.QueueDeclarePassive("notifications.retry", true, false, false, false, nil); err == nil && q.Messages > 0 {
			seenRetry = true
		}
	})
	require.True(t, seenRetry, "the notification waited in notifications.retry")

	// Step 4: failed, 6 attempts, the last error; the dead letter with its
	// headers.
	require.Equal(t, 6, n.Attempts, "1 attempt + 5 retries")
	require.NotNil(t, n.LastError)
	require.Contains(t, *n.LastError, "451")
	var dead []amqp.Delivery
	require.Eventually(t, func() bool {
		dead = append(dead, drain(t, ch, "notifications.send.dlq")...)
		return len(dead) >= 1
	}, 10*time.Second, 20*time.Millisecond)
	require.Len(t, dead, 1)
	require.EqualValues(t, 5, dead[0].Headers["x-retry-count"])
	require.Contains(t, dead[0].Headers["x-last-error"], "451")
	require.True(t, relay.Running(), "the relay, on the default delay, runs:\n%s", relay.Log())
}

// waitStatusWhile is waitStatus calling also on each poll.
func (s *stack) waitStatusWhile(id, status string, within time.Duration, also func()) notification {
	s.t.Helper()
	var n notification
	require.Eventually(s.t, func() bool {
		also()
		n = s.api.get(s.t, id)
		return n.Status == status
	}, within, 20*time.Millisecond, "notification %s never became %s (last: %+v)", id, status, n)
	return n
}
