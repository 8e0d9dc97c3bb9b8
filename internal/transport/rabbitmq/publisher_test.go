package rabbitmq_test

import (
	"context"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

func TestPublishConfirmsAllWithContractProperties(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	p := newPublisher(t, cfg)
	evs := events(101, 25)

	confirmed, err := p.Publish(context.Background(), evs)
	require.NoError(t, err)
	require.Equal(t, ids(evs), confirmed)

	ch := adminChannel(t, cfg)
	top := cfg.Topology()
	require.Equal(t, len(evs), queueLen(t, ch, top.SendQueue))
	for _, ev := range evs {
		d := get(t, ch, top.SendQueue)
		require.Equal(t, notify.FormatID(ev.ID), d.MessageId)
		require.Equal(t, uint8(amqp.Persistent), d.DeliveryMode)
		require.Equal(t, "application/json", d.ContentType)
		require.Equal(t, notify.EventRequested, d.Type)
		require.Equal(t, "notification.requested", d.RoutingKey)
		require.Equal(t, top.Exchange, d.Exchange)
		require.True(t, ev.OccurredAt.Equal(d.Timestamp), "timestamp %s, want %s", d.Timestamp, ev.OccurredAt)
		require.Equal(t, ev.Payload, d.Body)
		require.NotContains(t, d.Headers, "x-retry-count")
	}

	none, err := p.Publish(context.Background(), nil)
	require.NoError(t, err)
	require.Empty(t, none)
}

func TestPublishUnroutableIsNotConfirmed(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	top := cfg.Topology()
	ch := adminChannel(t, cfg)
	p := newPublisher(t, cfg)
	// Connected (and declared) first, so that no declare rebinds the queue.
	confirmed, err := p.Publish(context.Background(), events(100, 1))
	require.NoError(t, err)
	require.Equal(t, []int64{100}, confirmed)
	require.NoError(t, ch.QueueUnbind(top.SendQueue, "notification.requested", top.Exchange, nil))

	confirmed, err = p.Publish(context.Background(), events(1, 3))
	require.Error(t, err)
	require.ErrorContains(t, err, "unroutable")
	require.ErrorContains(t, err, "NO_ROUTE")
	require.Empty(t, confirmed)

	// A return is no channel failure: once routable again, the same
	// publisher gets the same events through.
	require.NoError(t, ch.QueueBind(top.SendQueue, "notification.requested", top.Exchange, false, nil))
	confirmed, err = p.Publish(context.Background(), events(1, 3))
	require.NoError(t, err)
	require.Equal(t, []int64{1, 2, 3}, confirmed)
	require.Equal(t, 4, queueLen(t, ch, top.SendQueue), "event 100 and events 1-3")
}

func TestPublishAfterCloseFails(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	p := newPublisher(t, cfg)
	_, err := p.Publish(context.Background(), events(1, 1))
	require.NoError(t, err)
	require.NoError(t, p.Close())
	confirmed, err := p.Publish(context.Background(), events(2, 1))
	require.Error(t, err)
	require.Empty(t, confirmed)
}
