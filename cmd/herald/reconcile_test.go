package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The database is the record (guarantee 6): a notification whose retry was
// purged from notifications.retry by hand, an operator's mistake the broker
// cannot undo, is delivered after HERALD_RECONCILE_AFTER, exactly once.
func TestPurgedRetryReconciled(t *testing.T) {
	t.Parallel()
	s := newStack(t, map[string]string{
		"HERALD_RETRY_DELAY":     "3s",
		"HERALD_RECONCILE_AFTER": "2s",
	})
	s.startAPI(nil)
	s.start("relay")
	s.start("worker")
	s.waitTopology()
	ch := s.channel()

	s.smtp.Fail(451, "4.7.1 greylisted, try again later")
	r := s.api.create(t, "grey@example.com", nil)
	require.Equal(t, 201, r.Status, r.Body)
	// The first attempt failed and the retry waits in notifications.retry.
	require.Eventually(t, func() bool {
		return s.queueDepth("notifications.retry") == 1
	}, 30*time.Second, 20*time.Millisecond, "the retry never reached notifications.retry")
	purged, err := ch.QueuePurge("notifications.retry", false)
	require.NoError(t, err)
	require.Equal(t, 1, purged)
	s.smtp.Fail(0, "")

	n := s.waitStatus(r.ID, "sent", 60*time.Second)
	require.Equal(t, 2, n.Attempts, "the failed attempt and the reconciled one")
	require.Equal(t, 1, s.smtp.Count(), "delivered exactly once")
	require.Eventually(t, func() bool {
		return scrape(t, s.api.base+"/metrics", "herald_reconciled_total") == 1
	}, 10*time.Second, 20*time.Millisecond)
	// Nothing else is sent later: no copy is left anywhere.
	require.Empty(t, drain(t, ch, "notifications.retry"))
	s.waitOutboxEmpty()
}
