package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/testlog"
)

// heldFailingSender fails every send (a transient error, so each spends an
// attempt and is retried until the retries run out). The first send of
// each subject waits until release is closed. It counts sends by subject.
type heldFailingSender struct {
	release chan struct{}

	mu      sync.Mutex
	count   map[string]int
	waiting int
}

func (s *heldFailingSender) Send(ctx context.Context, e notify.Outgoing) error {
	s.mu.Lock()
	if s.count == nil {
		s.count = map[string]int{}
	}
	s.count[e.Subject]++
	first := s.count[e.Subject] == 1
	if first {
		s.waiting++
	}
	s.mu.Unlock()
	if first {
		<-s.release
	}
	return errors.New("451 4.3.0 try again later")
}

func (s *heldFailingSender) held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting
}

func (s *heldFailingSender) counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.count))
	for k, v := range s.count {
		out[k] = v
	}
	return out
}

// The defect of issue 16: a handler that calls Retry after its partition
// was revoked (it outlived the revoke's grace) still writes its retry copy,
// and the partition's new owner delivers the original again (its offset was
// never committed). The store refuses the original as a stale copy, so each
// notification gets exactly 1+MaxRetries attempts.
func TestRetryAfterRevokeSpendsNoExtraAttempt(t *testing.T) {
	t.Parallel()
	p := pipelineHarness(t, newCluster(t, 3))
	p.Pump(t, t.Context())
	const users = 24
	cfg := p.cfg
	cfg.Prefetch = users
	cfg.ShutdownGrace = 300 * time.Millisecond // the revoke's wait for handlers in flight
	snd := &heldFailingSender{release: make(chan struct{})}
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(snd.release) }) })

	var logsA testlog.Buffer
	cfgA := cfg
	cfgA.Logger = slog.New(slog.NewTextHandler(&logsA, nil))
	runWorker(t, p, cfgA, snd)
	var ns []notify.Notification
	for u := range users {
		ns = append(ns, create(t, p, fmt.Sprintf("user%d", u), fmt.Sprintf("user%02d", u), 1)...)
	}
	require.Eventually(t, func() bool { return snd.held() == users }, waitFor, 10*time.Millisecond,
		"the first worker did not start every send")

	// A second worker joins: the first gives up some partitions while its
	// sends on them are still in flight.
	runWorker(t, p, cfg, snd)
	require.Eventually(t, func() bool {
		return strings.Contains(logsA.String(), "deliveries still in flight on revoked partitions")
	}, waitFor, 10*time.Millisecond, "no partition was revoked under a send in flight")
	// The sends fail now, after the revoke: their handlers record the
	// retries and write the copies, and the new owner has the originals.
	release.Do(func() { close(snd.release) })

	const maxRetries = 2 // runWorker's
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, n := range ns {
			g, err := p.store.Get(t.Context(), n.ID)
			require.NoError(c, err)
			require.Equal(c, notify.StatusFailed, g.Status, "notification %d (%s)", n.ID, n.Subject)
		}
	}, 2*waitFor, 50*time.Millisecond)
	want := map[string]int{}
	for _, n := range ns {
		want[n.Subject] = 1 + maxRetries
		g, err := p.store.Get(t.Context(), n.ID)
		require.NoError(t, err)
		require.Equal(t, 1+maxRetries, g.Attempts, "attempts of %s", n.Subject)
	}
	require.Equal(t, want, snd.counts(), "sends by subject")
}
