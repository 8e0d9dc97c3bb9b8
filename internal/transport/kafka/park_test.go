package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/testenv"
	"github.com/heraldhq/herald/internal/transport/kafka"
)

// A parked record gives up its key: the next notification of the same user
// is delivered while the first is parked, and the parked one comes back
// after its wait, behind it, unchanged, through the retry topic. Holding
// the key instead would stall every notification of that user (of any
// channel) behind a channel that is down.
func TestParkGivesUpItsKey(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	cfg := c.config(uniquePrefix(t))
	pub := newPublisher(t, cfg)
	evs := []notify.Event{
		{ID: 1, Type: notify.EventRequested, Payload: []byte(`{"notification_id":"1","user_id":"same-user"}`), OccurredAt: time.Now()},
		{ID: 2, Type: notify.EventRequested, Payload: []byte(`{"notification_id":"2","user_id":"same-user"}`), OccurredAt: time.Now()},
	}
	_, err := pub.Publish(t.Context(), evs)
	require.NoError(t, err)

	const after = 2 * time.Second
	var (
		a        arrivals
		parkedAt = make(chan time.Time, 1)
	)
	src, err := kafka.NewConsumer(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- src.Consume(ctx, func(hctx context.Context, d notify.Delivery) {
			id := d.Message().ID
			a.add(id)
			assert.Zero(t, d.Message().RetryCount, "a park is not a retry")
			if id == 1 && len(a.get(1)) == 1 {
				at := time.Now()
				assert.NoError(t, d.Release(hctx, after), "park")
				parkedAt <- at
				return
			}
			assert.NoError(t, d.Ack(hctx))
		})
	}()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})

	var parked time.Time
	select {
	case parked = <-parkedAt:
	case <-time.After(waitFor):
		t.Fatal("never parked")
	}
	require.Eventually(t, func() bool { return len(a.get(1)) == 2 && len(a.get(2)) == 1 }, waitFor, 10*time.Millisecond,
		"deliveries")
	back, next := a.get(1)[1], a.get(2)[0]
	require.True(t, next.Before(back), "the user's next notification waited for the parked one")
	require.Less(t, next.Sub(parked), after, "the user's next notification waited out the park")
	require.GreaterOrEqual(t, testenv.Waited(parked, back), testenv.NotBefore(after), "the parked record came back early")

	copies := readTopic(t, cfg, cfg.Topics().Retry)
	require.Len(t, copies, 1, "the park's copy in the retry topic")
	require.Equal(t, "1", header(copies[0], kafka.HeaderMessageID))
	require.Equal(t, "2000", header(copies[0], kafka.HeaderRetryDelay))
	require.Equal(t, "same-user", string(copies[0].Key), "the copy keeps its key")
}
