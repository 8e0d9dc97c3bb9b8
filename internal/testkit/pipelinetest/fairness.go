package pipelinetest

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FairBigEnv names the environment variable that sets how many webhooks
// the busy endpoint of the fair-share subtest has pending (the issue's
// figure is 10000). Default defaultFairBig.
const FairBigEnv = "HERALD_ISOLATION_FAIR_BIG"

// defaultFairBig is the busy endpoint's backlog under make test: many
// windows of it, so that the others' rows lie far behind it.
const defaultFairBig = 1500

// Fair across destinations (issue 32): one endpoint with a long backlog
// created first, then 99 endpoints with 10 webhooks each. Each endpoint
// takes hookLatency per request, so the busy one, held to its share of the
// sends, needs its backlog x hookLatency / isoShare; the 99 finish first,
// long before it, and every webhook of theirs is sent once.
func testFairShare(t *testing.T, e *env, _ time.Duration) {
	big := defaultFairBig
	if v := os.Getenv(FairBigEnv); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "%s", FairBigEnv)
		big = n
	}
	h, secret := newHub(t)
	busy := h.endpoint()
	others := endpoints(h, 99)

	start := time.Now()
	var bigKeys []string
	for i := range big {
		k := fmt.Sprintf("busy-%d", i)
		e.createHook(t, k, busy)
		bigKeys = append(bigKeys, k)
	}
	var f flow
	for i, url := range others {
		for j := range 10 {
			k := fmt.Sprintf("other-%d-%d", i, j)
			f.sent = append(f.sent, e.createHook(t, k, url))
			f.keys = append(f.keys, k)
		}
	}
	created := time.Since(start)
	e.h.Pump(t, e.ctx)
	w := e.startIsoWorker(t, e.smtp.URL(), secret, isoOptions{})
	run := time.Now()

	require.Eventually(t, func() bool {
		n, _ := h.delivered(f.keys)
		return n == len(f.keys)
	}, flowWait+time.Duration(big)*hookLatency/isoShare/2, tick, "the 99 endpoints' webhooks were not all delivered")
	_, last := h.delivered(f.keys)
	busyDone, _ := h.delivered(bigKeys)
	t.Logf("fair share: %d webhooks to 99 endpoints all delivered %s after the worker started (created in %s, behind %d to one endpoint); the busy endpoint had %d of its %d by then",
		len(f.keys), last.Sub(run).Round(time.Millisecond), created.Round(time.Millisecond), big, busyDone, big)
	require.Less(t, busyDone, big, "the 99 finished first: the busy endpoint still had webhooks pending")
	e.checkFlows(t, h, f)
	w.noRetries(t)
}
