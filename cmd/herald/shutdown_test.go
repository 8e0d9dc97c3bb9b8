package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A worker stopped with SIGTERM while its sends hang (a provider slower
// than the shutdown grace) cuts them short and hands them back: a
// shutdown doing its job, so it exits 0, logs nothing at ERROR, and says
// how many it handed back; the notifications stay pending, no attempt
// spent. (The worker's own test, TestShutdownHandBackIsNoError, holds the
// case issue 38 saw: a delivery still waiting for a send slot.)
func TestWorkerShutdownHandBackIsNoError(t *testing.T) {
	t.Parallel()
	slow := startSlowSMTP(t, 20*time.Second)
	s := newStack(t, map[string]string{"HERALD_SMTP_URL": slow.url()})
	s.startAPI(nil)
	s.start("relay")
	w := s.start("worker")

	var ids []string
	for range 3 {
		r := s.api.create(t, "ann@example.com", nil)
		require.Equal(t, http.StatusCreated, r.Status, r.Body)
		ids = append(ids, r.ID)
	}
	require.Eventually(t, func() bool { return slow.started.Load() >= 3 }, 30*time.Second, 10*time.Millisecond,
		"the sends never reached the SMTP server")
	require.NoError(t, w.Stop(30*time.Second))
	require.NoError(t, w.Err(), "a stop on SIGTERM exits 0:\n%s", w.Log())
	require.NotContains(t, w.Log(), "level=ERROR", "a hand-back on shutdown is not an error")
	require.Contains(t, w.Log(), `msg="worker stopped" component=worker handed_back=3`)
	for _, line := range strings.Split(w.Log(), "\n") {
		require.NotContains(t, line, "context canceled", "a shutdown's hand-back logs no cancelled context at INFO")
	}
	for _, id := range ids {
		require.Equal(t, "pending", s.api.get(t, id).Status)
	}
}
