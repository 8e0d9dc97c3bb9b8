package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/transport/rabbitmq"
)

// depthOf finds a queue's line in a report.
func depthOf(t *testing.T, qs []notify.QueueDepth, name string) notify.QueueDepth {
	t.Helper()
	for _, q := range qs {
		if q.Name == name {
			return q
		}
	}
	t.Fatalf("queue %s not reported in %v", name, qs)
	return notify.QueueDepth{}
}

// Depth reports each declared queue's ready messages and consumers, by
// role; before the topology is declared it reports none and creates none.
func TestDepth(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	ctx := t.Context()
	d := rabbitmq.Depth{Config: cfg}

	qs, err := d.QueueDepths(ctx)
	require.NoError(t, err)
	require.Empty(t, qs, "nothing declared yet")
	qs, err = d.QueueDepths(ctx)
	require.NoError(t, err)
	require.Empty(t, qs, "a passive declare creates nothing")

	declared(t, cfg)
	p := newPublisher(t, cfg)
	_, err = p.Publish(ctx, events(1, 3))
	require.NoError(t, err)
	topo := cfg.Topology()
	qs, err = d.QueueDepths(ctx)
	require.NoError(t, err)
	send := depthOf(t, qs, topo.SendQueue)
	require.Equal(t, notify.QueueSend, send.Role)
	require.EqualValues(t, 3, send.Ready)
	require.NotNil(t, send.Consumers)
	require.Zero(t, *send.Consumers)
	require.Nil(t, send.InFlight, "AMQP does not tell the unacknowledged count")
	require.Equal(t, notify.QueueDead, depthOf(t, qs, topo.DeadLetterQueue).Role)
	require.Equal(t, notify.QueueRetry, depthOf(t, qs, topo.RetryQueueFor(1)).Role)
	require.Equal(t, notify.QueuePark, depthOf(t, qs, topo.ParkQueues()[0].Name).Role)
	require.Len(t, qs, len(topo.Queues()))

	// A consumer that holds every message until it stops: none ready,
	// one consumer.
	held := make(chan notify.Delivery, 3)
	stop, _ := consumer(t, cfg, func(ctx context.Context, dl notify.Delivery) {
		held <- dl
		<-ctx.Done()
	})
	require.Eventually(t, func() bool {
		qs, err := d.QueueDepths(ctx)
		require.NoError(t, err)
		s := depthOf(t, qs, topo.SendQueue)
		return s.Ready == 0 && *s.Consumers == 1
	}, waitFor, 20*time.Millisecond)
	// The broker counts a message as handed out when it is on the wire, a
	// moment before the handler has it.
	require.Eventually(t, func() bool { return len(held) == 3 }, waitFor, 10*time.Millisecond)
	_ = stop()
}
