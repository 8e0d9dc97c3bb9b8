package main

import (
	"net/url"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/faultproxy"
	"github.com/heraldhq/herald/internal/testkit/smtptest"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// SQLite + RabbitMQ with a broker that accepts TCP and never answers:
// creates do not wait for it (the relay held SQLite's only write
// transaction across the broker dial: create p99 was 30s), and once the
// broker answers every notification is delivered.
func TestRelayHungBrokerDoesNotSlowCreatesOnSQLite(t *testing.T) {
	t.Parallel()
	broker, err := url.Parse(testenv.Vhost(t))
	require.NoError(t, err)
	proxy, err := faultproxy.New(broker.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	proxy.Blackhole()
	broker.Host = proxy.Addr()

	dir := t.TempDir()
	addr := freeAddr(t)
	sink := smtptest.Start(t)
	startHerald(t, dir, map[string]string{
		"HERALD_DATABASE_URL":   "sqlite:" + filepath.Join(dir, "herald.db"),
		"HERALD_BROKER_URL":     broker.String(),
		"HERALD_HTTP_ADDR":      addr,
		"HERALD_SMTP_URL":       sink.URL(),
		"HERALD_SMTP_FROM":      "herald@example.com",
		"HERALD_RELAY_INTERVAL": "100ms",
	}, "serve")
	api := client{base: "http://" + addr}
	waitHTTP(t, api.base+"/healthz")
	// The relay is inside its first publish, stuck in the handshake.
	first := api.create(t, "first@example.com", nil)
	require.Equal(t, 201, first.Status, first.Body)
	require.Eventually(t, func() bool { return proxy.Accepted() > 0 }, 10*time.Second, 10*time.Millisecond)

	const n, clients = 60, 8
	var (
		mu        sync.Mutex
		latencies []time.Duration
		ids       = []string{first.ID}
		wg        sync.WaitGroup
	)
	next := make(chan int)
	for range clients {
		wg.Go(func() {
			for i := range next {
				start := time.Now()
				r := api.create(t, "user@example.com", nil)
				d := time.Since(start)
				if r.Status != 201 {
					t.Errorf("create %d: %d %s", i, r.Status, r.Body)
					continue
				}
				mu.Lock()
				latencies = append(latencies, d)
				ids = append(ids, r.ID)
				mu.Unlock()
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	require.Len(t, latencies, n)
	slices.Sort(latencies)
	p99 := latencies[len(latencies)*99/100-1]
	t.Logf("%d creates from %d clients with the broker silent: p50 %s, p99 %s, max %s",
		n, clients, latencies[len(latencies)/2], p99, latencies[len(latencies)-1])
	require.Less(t, p99, time.Second, "create p99 with a silent broker")

	// The broker answers again: nothing was lost.
	proxy.Pass()
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if api.get(t, id).Status != "sent" {
				return false
			}
		}
		return true
	}, 120*time.Second, 200*time.Millisecond, "every notification delivered once the broker answers")
}
