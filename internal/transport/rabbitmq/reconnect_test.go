package rabbitmq_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// TestReconnectAfterConnectionClosed closes the publisher's and the
// consumer's connections (and only those) on the broker, and shows that both
// carry on on their own.
func TestReconnectAfterConnectionClosed(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	pubCfg, conCfg := cfg, cfg
	pubCfg.ConnectionName += "publisher"
	conCfg.ConnectionName += "consumer"
	p := newPublisher(t, pubCfg)

	var rec recorder
	consumer(t, conCfg, func(ctx context.Context, d notify.Delivery) {
		rec.add(d.Message())
		assert.NoError(t, d.Ack(ctx))
	})

	next := int64(1)
	// publishUntilDelivered publishes a fresh event per attempt until one is
	// confirmed and reaches the consumer.
	publishUntilDelivered := func() {
		t.Helper()
		require.Eventually(t, func() bool {
			confirmed, err := p.Publish(context.Background(), events(next, 1))
			next++
			if err != nil {
				t.Logf("publish while reconnecting: %v", err)
				return false
			}
			require.Len(t, confirmed, 1)
			require.Eventually(t, func() bool { return slices.Contains(rec.ids(), confirmed[0]) },
				waitFor, 10*time.Millisecond, "confirmed message %d never consumed", confirmed[0])
			return true
		}, waitFor, 50*time.Millisecond)
	}
	publishUntilDelivered()

	old := closeConnections(t, pubCfg.ConnectionName, conCfg.ConnectionName)
	publishUntilDelivered()

	// Both came back under their own names, on new connections.
	require.Eventually(t, func() bool {
		pids := connectionPIDs(t, pubCfg.ConnectionName, conCfg.ConnectionName)
		for name, pid := range old {
			now := pids[name]
			if len(now) != 1 || now[0] == pid {
				return false
			}
		}
		return true
	}, waitFor, 100*time.Millisecond, "publisher and consumer must each hold one new connection")
}
