package nats_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/faultproxy"
	"github.com/heraldhq/herald/internal/testkit/testenv"
	"github.com/heraldhq/herald/internal/testkit/testlog"
	natstr "github.com/heraldhq/herald/internal/transport/nats"
)

// A consumer whose server was killed and restarted, and whose next
// reconnection meets a broker that accepts TCP and never answers, stops
// promptly when its context ends: the client's reconnection handshake
// (which holds the connection's lock, bounded only by the 10s connect
// timeout) must not hold up the shutdown past ShutdownGrace + 2s. Before
// the bound it took 14.6s.
func TestStopDuringSilentReconnect(t *testing.T) {
	srv := testenv.StartNATS(t, testenv.NATSOptions{})
	cfg := config(t, srv)
	px, err := faultproxy.New(strings.TrimPrefix(srv.URL(), "nats://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = px.Close() })
	cfg.URL = "nats://" + px.Addr()
	cfg.ShutdownGrace = 5 * time.Second
	var logs testlog.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	pub := newPublisher(t, cfg)
	var r record
	c, err := natstr.NewConsumer(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Consume(ctx, acking(t, &r)) }()
	_, err = pub.Publish(t.Context(), events(t, 1, 10))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return r.distinct() == 10 }, wait, tick)

	srv.Kill()
	time.Sleep(time.Second) // the server's outage, not a synchronisation
	srv.Start()
	require.Eventually(t, func() bool {
		return strings.Count(logs.String(), `msg="nats connection restored" role=consumer`) >= 1
	}, wait, tick, "consumer did not reconnect after the restart")

	// Cut the connection; the reconnection is accepted and never answered.
	px.Blackhole()
	px.Reset()
	t.Cleanup(px.Pass)
	require.Eventually(t, func() bool {
		return strings.Count(logs.String(), `msg="nats connection lost; reconnecting" role=consumer`) >= 2
	}, wait, tick, "consumer did not see the connection cut")

	start := time.Now()
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
		t.Logf("Consume returned %s after its context ended", time.Since(start).Round(time.Millisecond))
	case <-time.After(9 * time.Second):
		t.Fatalf("Consume did not return within 9s of its context ending (ShutdownGrace 5s + 2s; idle, reconnecting)\n%s", logs.String())
	}
}
