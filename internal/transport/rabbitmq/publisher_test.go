package rabbitmq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

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

// Status events go to the notifications exchange under their type: a queue
// another service binds to notification.* receives them, with the outbox id
// as message id; none reaches the send queue.
func TestPublishStatusEventsToBoundQueue(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	top := cfg.Topology()
	ch := declared(t, cfg)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(q.Name, "notification.*", top.Exchange, false, nil))
	p := newPublisher(t, cfg)

	evs := append(events(1, 1), statusEvents(2, notify.EventSent, notify.EventFailed)...)
	confirmed, err := p.Publish(context.Background(), evs)
	require.NoError(t, err)
	require.Equal(t, ids(evs), confirmed)

	// The bound queue has all three (it matches notification.requested
	// too); the send queue only the requested one.
	require.Equal(t, 3, queueLen(t, ch, q.Name))
	for _, ev := range evs {
		d := get(t, ch, q.Name)
		require.Equal(t, notify.FormatID(ev.ID), d.MessageId)
		require.Equal(t, ev.Type, d.RoutingKey)
		require.Equal(t, ev.Type, d.Type)
		require.Equal(t, ev.Payload, d.Body)
		require.Equal(t, uint8(amqp.Persistent), d.DeliveryMode)
	}
	require.Equal(t, 1, queueLen(t, ch, top.SendQueue))
	require.Equal(t, notify.EventRequested, get(t, ch, top.SendQueue).Type)
}

// With no queue bound to their routing keys, status events are dropped by
// the broker and confirmed (not mandatory); notification.requested stays
// mandatory in the same batch.
func TestPublishStatusEventsUnboundAreConfirmed(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	top := cfg.Topology()
	ch := adminChannel(t, cfg)
	p := newPublisher(t, cfg)
	evs := statusEvents(1, notify.EventSent, notify.EventFailed)
	confirmed, err := p.Publish(context.Background(), evs)
	require.NoError(t, err)
	require.Equal(t, ids(evs), confirmed)
	require.Zero(t, queueLen(t, ch, top.SendQueue))

	require.NoError(t, ch.QueueUnbind(top.SendQueue, "notification.requested", top.Exchange, nil))
	mixed := append(events(10, 1), statusEvents(11, notify.EventSent)...)
	confirmed, err = p.Publish(context.Background(), mixed)
	require.ErrorContains(t, err, "unroutable")
	require.Equal(t, []int64{11}, confirmed, "the unroutable request is returned, the status event confirmed")
}

// statusEvents returns status events of the given types with ids from
// first on.
func statusEvents(first int64, types ...string) []notify.Event {
	evs := make([]notify.Event, len(types))
	for i, typ := range types {
		id := first + int64(i)
		evs[i] = notify.Event{
			ID:         id,
			Type:       typ,
			Payload:    fmt.Appendf(nil, `{"notification_id":"%d","status":"x"}`, id),
			OccurredAt: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC),
		}
	}
	return evs
}
