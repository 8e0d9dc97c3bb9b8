package rabbitmq_test

import (
	"context"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/testenv"
	"github.com/heraldhq/herald/internal/transport/rabbitmq"
)

// testDeliveryLimit is the broker-side delivery limit the tests set by
// policy. RabbitMQ 4.0 to 4.2 give quorum queues a default limit of 20 and
// count every requeue and every delivery a lost channel returns; 3.10 does
// the same once a policy sets a limit, so a small one shows the failure
// without waiting for 20 hand-backs.
const testDeliveryLimit = 3

// limitedSetup returns a configuration on a vhost of the test's own whose
// send queue has a delivery limit of testDeliveryLimit (policy, quorum
// queues, the default type). The vhost is deleted when the test ends.
func limitedSetup(t *testing.T) rabbitmq.Config {
	t.Helper()
	cfg, setPolicy := vhostSetup(t)
	setPolicy(`{"delivery-limit":` + strconv.Itoa(testDeliveryLimit) + `}`)
	return cfg
}

// vhostSetup returns a configuration on a vhost of the test's own, deleted
// when the test ends, and a func that sets a policy of the given definition
// (JSON) on its send queue.
func vhostSetup(t *testing.T) (rabbitmq.Config, func(definition string)) {
	t.Helper()
	vhostURL := testenv.Vhost(t)
	u, err := url.Parse(vhostURL)
	require.NoError(t, err)
	vhost := strings.TrimPrefix(u.Path, "/")
	cfg := setup(t) // its cleanup runs before the vhost's
	cfg.URL = vhostURL
	require.Equal(t, rabbitmq.QueueQuorum, cfg.Topology().QueueType)
	return cfg, func(definition string) {
		t.Helper()
		rabbitmqctl(t, "set_policy", "-p", vhost, "--apply-to", "queues", "herald-test",
			"^"+regexp.QuoteMeta(cfg.Topology().SendQueue)+"$", definition)
	}
}

// counts records how often each message was delivered and which were
// acknowledged.
type counts struct {
	mu    sync.Mutex
	seen  map[int64]int
	acked map[int64]bool
	msgs  []notify.Message
}

func newCounts() *counts { return &counts{seen: map[int64]int{}, acked: map[int64]bool{}} }

func (c *counts) add(m notify.Message) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[m.ID]++
	c.msgs = append(c.msgs, m)
	return c.seen[m.ID]
}

func (c *counts) ack(id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.acked[id] = true
}

func (c *counts) ackedN() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.acked)
}

func (c *counts) times(id int64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[id]
}

func (c *counts) all() []notify.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]notify.Message(nil), c.msgs...)
}

// TestReleaseNeverReachesDeliveryLimit hands every message back more than
// twenty times, as a worker does for twenty minutes of a provider outage,
// under a delivery limit of three: nothing may be dead-lettered by the
// broker, and every message must still be delivered unchanged and
// acknowledged in the end.
func TestReleaseNeverReachesDeliveryLimit(t *testing.T) {
	t.Parallel()
	cfg := limitedSetup(t)
	top := cfg.Topology()
	p := newPublisher(t, cfg)
	evs := events(1, 3)
	confirmed, err := p.Publish(context.Background(), evs)
	require.NoError(t, err)
	require.Len(t, confirmed, len(evs))

	const releases = 21
	c := newCounts()
	stop, _ := consumer(t, cfg, func(ctx context.Context, d notify.Delivery) {
		m := d.Message()
		if c.add(m) <= releases {
			assert.NoError(t, d.Release(ctx, 0))
			return
		}
		if assert.NoError(t, d.Ack(ctx)) {
			c.ack(m.ID)
		}
	})
	ch := adminChannel(t, cfg)
	require.Eventually(t, func() bool {
		return c.ackedN() == len(evs) || queueLen(t, ch, top.DeadLetterQueue) > 0
	}, 6*waitFor, 20*time.Millisecond, "messages never acknowledged")
	require.NoError(t, stop())

	require.Zero(t, queueLen(t, ch, top.DeadLetterQueue), "the broker dead-lettered a message that was only handed back")
	require.Equal(t, len(evs), c.ackedN(), "every message acknowledged in the end")
	for _, ev := range evs {
		require.Equal(t, releases+1, c.times(ev.ID), "message %d: deliveries", ev.ID)
	}
	for _, m := range c.all() {
		ev := evs[m.ID-1]
		require.Equal(t, ev.Payload, m.Payload, "handed back unchanged")
		require.Zero(t, m.RetryCount, "a hand-back is not a retry")
		require.True(t, ev.OccurredAt.Equal(m.OccurredAt), "occurred-at kept")
	}
	require.Zero(t, queueLen(t, ch, top.SendQueue))
}

// TestParkNeverReachesDeliveryLimit parks every message more often than
// the delivery limit of three allows deliveries, as a worker does while a
// channel or destination stays down: a parked message waits in a park
// queue as a fresh copy, so nothing may be dead-lettered by the broker, and
// every message comes back each time, unchanged, and is acknowledged in
// the end.
func TestParkNeverReachesDeliveryLimit(t *testing.T) {
	t.Parallel()
	cfg := limitedSetup(t)
	top := cfg.Topology()
	p := newPublisher(t, cfg)
	evs := events(1, 2)
	_, err := p.Publish(context.Background(), evs)
	require.NoError(t, err)

	// The shortest park (a millisecond asked for waits a second), so that
	// the test takes parks seconds.
	const parks = testDeliveryLimit + 2
	c := newCounts()
	stop, _ := consumer(t, cfg, func(ctx context.Context, d notify.Delivery) {
		m := d.Message()
		if c.add(m) <= parks {
			assert.NoError(t, d.Release(ctx, time.Millisecond))
			return
		}
		if assert.NoError(t, d.Ack(ctx)) {
			c.ack(m.ID)
		}
	})
	ch := adminChannel(t, cfg)
	require.Eventually(t, func() bool {
		return c.ackedN() == len(evs) || queueLen(t, ch, top.DeadLetterQueue) > 0
	}, waitFor+parks*time.Second, 20*time.Millisecond, "messages never acknowledged")
	require.NoError(t, stop())

	require.Zero(t, queueLen(t, ch, top.DeadLetterQueue), "the broker dead-lettered a message that was only parked")
	require.Equal(t, len(evs), c.ackedN(), "every message acknowledged in the end")
	for _, ev := range evs {
		require.Equal(t, parks+1, c.times(ev.ID), "message %d: deliveries", ev.ID)
	}
	for _, m := range c.all() {
		ev := evs[m.ID-1]
		require.Equal(t, ev.Payload, m.Payload, "parked unchanged")
		require.Zero(t, m.RetryCount, "a park is not a retry")
		require.True(t, ev.OccurredAt.Equal(m.OccurredAt), "occurred-at kept")
	}
	for _, q := range append(top.ParkQueues(), rabbitmq.DelayQueue{Name: top.SendQueue}) {
		require.Zero(t, queueLen(t, ch, q.Name), "queue %s", q.Name)
	}
}

// TestStoppedConsumerNeverReachesDeliveryLimit stops a consumer whose
// handler left every delivery unsettled (the Handler contract: they stay
// with the transport and come again), five times in a row, under a delivery
// limit of three: nothing may be dead-lettered by the broker, and the next
// consumer gets every message.
func TestStoppedConsumerNeverReachesDeliveryLimit(t *testing.T) {
	t.Parallel()
	cfg := limitedSetup(t)
	top := cfg.Topology()
	p := newPublisher(t, cfg)
	evs := events(1, 3)
	_, err := p.Publish(context.Background(), evs)
	require.NoError(t, err)
	ch := adminChannel(t, cfg)

	for round := range 5 {
		c := newCounts()
		stop, _ := consumer(t, cfg, func(_ context.Context, d notify.Delivery) { c.add(d.Message()) })
		require.Eventually(t, func() bool {
			for _, ev := range evs {
				if c.times(ev.ID) == 0 {
					return false
				}
			}
			return true
		}, waitFor, 10*time.Millisecond, "round %d: not every message was delivered", round)
		require.NoError(t, stop())
		require.Zero(t, queueLen(t, ch, top.DeadLetterQueue), "round %d: dead-lettered by the broker", round)
	}

	c := newCounts()
	stop, _ := consumer(t, cfg, func(ctx context.Context, d notify.Delivery) {
		c.add(d.Message())
		if assert.NoError(t, d.Ack(ctx)) {
			c.ack(d.Message().ID)
		}
	})
	require.Eventually(t, func() bool { return c.ackedN() == len(evs) }, waitFor, 10*time.Millisecond)
	require.NoError(t, stop())
	require.Zero(t, queueLen(t, ch, top.DeadLetterQueue))
	require.Zero(t, queueLen(t, ch, top.SendQueue))
	for _, m := range c.all() {
		require.Equal(t, evs[m.ID-1].Payload, m.Payload)
		require.Zero(t, m.RetryCount)
	}
}

// TestLostConnectionsNeverReachDeliveryLimit closes the consumer's
// connection on the broker five times in a row while its handler holds
// every delivery unsettled, under a delivery limit of three. The broker
// takes them back each time and counts it, which nothing can prevent; the
// consumer replaces a delivery it has returned twice with a fresh copy, so
// nothing is dead-lettered and every message is acknowledged in the end.
func TestLostConnectionsNeverReachDeliveryLimit(t *testing.T) {
	t.Parallel()
	cfg := limitedSetup(t)
	top := cfg.Topology()
	p := newPublisher(t, cfg)
	cfg.ConnectionName += "consumer"
	evs := events(1, 3)
	_, err := p.Publish(context.Background(), evs)
	require.NoError(t, err)
	ch := adminChannel(t, cfg)

	var (
		mu    sync.Mutex
		round = newCounts()
		final = newCounts()
		ack   bool
	)
	consumer(t, cfg, func(ctx context.Context, d notify.Delivery) {
		mu.Lock()
		c, settle := round, ack
		if settle {
			c = final
		}
		mu.Unlock()
		c.add(d.Message())
		if settle && assert.NoError(t, d.Ack(ctx)) {
			c.ack(d.Message().ID)
		}
	})
	for n := range 5 {
		require.Eventually(t, func() bool {
			mu.Lock()
			c := round
			mu.Unlock()
			for _, ev := range evs {
				if c.times(ev.ID) == 0 {
					return false
				}
			}
			return true
		}, waitFor, 10*time.Millisecond, "loss %d: not every message was delivered", n)
		mu.Lock()
		round = newCounts()
		ack = n == 4
		mu.Unlock()
		closeConnections(t, cfg.ConnectionName)
	}
	require.Eventually(t, func() bool { return final.ackedN() == len(evs) }, waitFor, 10*time.Millisecond,
		"not every message came back after the last loss")
	require.Zero(t, queueLen(t, ch, top.DeadLetterQueue), "dead-lettered by the broker")
	for _, m := range final.all() {
		require.Equal(t, evs[m.ID-1].Payload, m.Payload)
		require.Zero(t, m.RetryCount)
	}
}
