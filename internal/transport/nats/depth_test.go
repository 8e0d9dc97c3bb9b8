package nats_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/testenv"
	natstr "github.com/heraldhq/herald/internal/transport/nats"
)

// Depth reports the workers' consumer (not yet delivered, delivered and
// not acknowledged), the retry consumer and the dead letters; before the
// stream exists it reports none and creates none.
func TestDepth(t *testing.T) {
	t.Parallel()
	srv := testenv.StartNATS(t, testenv.NATSOptions{})
	cfg := config(t, srv)
	ctx := t.Context()
	d := natstr.Depth{Config: cfg}

	qs, err := d.QueueDepths(ctx)
	require.NoError(t, err)
	require.Empty(t, qs, "no stream yet")
	qs, err = d.QueueDepths(ctx)
	require.NoError(t, err)
	require.Empty(t, qs, "asking creates nothing")

	require.NoError(t, natstr.DeclareStream(ctx, cfg))
	_, err = newPublisher(t, cfg).Publish(ctx, events(t, 1, 3))
	require.NoError(t, err)
	topo := cfg.Topology()
	qs, err = d.QueueDepths(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 3)
	send := qs[0]
	require.Equal(t, topo.Requested, send.Name)
	require.Equal(t, notify.QueueSend, send.Role)
	require.EqualValues(t, 3, send.Ready)
	require.NotNil(t, send.InFlight)
	require.Zero(t, *send.InFlight)
	require.NotNil(t, send.Consumers, "no worker ever ran: none consumes")
	require.Zero(t, *send.Consumers)
	require.Equal(t, notify.QueueRetry, qs[1].Role)
	require.Equal(t, topo.DeadLetter, qs[2].Name)
	require.Equal(t, notify.QueueDead, qs[2].Role)
	require.Zero(t, qs[2].Ready)

	// A worker that holds every message: none waiting, three in flight.
	runConsumer(t, cfg, func(ctx context.Context, _ notify.Delivery) { <-ctx.Done() })
	require.Eventually(t, func() bool {
		qs, err := d.QueueDepths(ctx)
		require.NoError(t, err)
		return qs[0].Ready == 0 && *qs[0].InFlight == 3
	}, wait, tick)
	qs, err = d.QueueDepths(ctx)
	require.NoError(t, err)
	require.Nil(t, qs[0].Consumers, "a pull consumer's workers are not counted")
}
