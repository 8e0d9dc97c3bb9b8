package rabbitmq_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/proctest"
	"github.com/heraldhq/herald/internal/transport/consume"
	"github.com/heraldhq/herald/internal/transport/rabbitmq"
)

// ClusterVar enables the tests that start RabbitMQ nodes of their own from
// the installed rabbitmq-server (a three-node cluster takes a minute or more
// to start on a busy machine): HERALD_TEST_RABBITMQ_CLUSTER=1. They never
// touch the machine's node: their nodes have names, ports, data, logs and an
// Erlang cookie of their own, and are killed when the test ends.
const ClusterVar = "HERALD_TEST_RABBITMQ_CLUSTER"

// node is one RabbitMQ node started by a test (the starter is shared with
// the chaos harness).
type node struct {
	*proctest.RabbitNode
}

// url is the node's AMQP URL.
func (n *node) url() string { return n.URL() }

// ctl runs rabbitmqctl (or another CLI of the scripts directory) against
// the node.
func (n *node) ctl(ctx context.Context, tool string, args ...string) (string, error) {
	return n.Ctl(ctx, tool, args...)
}

// kill stops the node the hard way (SIGKILL to its process group), as a
// crashed machine would, and waits for it to be gone.
func (n *node) kill(t *testing.T) {
	t.Helper()
	if err := n.Kill(); err != nil {
		t.Error(err)
	}
}

// startNodes starts n RabbitMQ nodes of the test's own and joins them into
// one cluster (n > 1). They are killed when the test ends.
func startNodes(t *testing.T, n int) []*node {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	rns, err := proctest.StartRabbitNodes(ctx, t.TempDir(), n)
	require.NoError(t, err)
	nodes := make([]*node, len(rns))
	for i, rn := range rns {
		nodes[i] = &node{rn}
		t.Cleanup(func() { nodes[i].kill(t) })
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, nd := range nodes {
				t.Log(nd.LogTail(4000))
			}
		}
	})
	return nodes
}

// queueLeader names the node that leads a quorum queue.
func queueLeader(t *testing.T, ctx context.Context, via *node, queue string) string {
	t.Helper()
	leader, members, err := proctest.QueueLeader(ctx, via.RabbitNode, "", queue)
	require.NoError(t, err)
	require.Len(t, members, 3, "queue %s must be replicated on the three nodes", queue)
	return leader
}

// TestClusterLeaderLoss runs load through a Publisher and a Consumer that
// are given the three nodes' URLs, kills the node that leads the send queue
// half-way, and finds every event consumed at least once.
func TestClusterLeaderLoss(t *testing.T) {
	if os.Getenv(ClusterVar) != "1" {
		t.Skipf("starts a RabbitMQ cluster of its own (over a minute): set %s=1 to run it", ClusterVar)
	}
	started := time.Now()
	nodes := startNodes(t, 3)
	t.Logf("three-node cluster up in %s", time.Since(started).Round(time.Millisecond))

	var urls []string
	for _, nd := range nodes {
		urls = append(urls, nd.url())
	}
	cfg := rabbitmq.Config{
		URL: strings.Join(urls, ","),
		Settings: consume.Settings{
			Prefix:        "cluster.",
			Prefetch:      50,
			ReconnectMin:  50 * time.Millisecond,
			ReconnectMax:  time.Second,
			ShutdownGrace: 5 * time.Second,
		},
		RetryDelay:     time.Second,
		ConfirmTimeout: 10 * time.Second,
	}
	pubCfg, conCfg := cfg, cfg
	pubCfg.ConnectionName = "cluster publisher"
	conCfg.ConnectionName = "cluster consumer"
	pub := newPublisher(t, pubCfg)

	const total = 3000
	var (
		mu        sync.Mutex
		seen      = map[int64]bool{}
		firstSeen time.Time // first delivery of an event published after the kill
		killedAt  time.Time
		afterKill int64 // the first event published after the kill
	)
	consumer(t, conCfg, func(ctx context.Context, d notify.Delivery) {
		now := time.Now()
		mu.Lock()
		seen[d.Message().ID] = true
		if afterKill > 0 && d.Message().ID >= afterKill && firstSeen.IsZero() {
			firstSeen = now
		}
		mu.Unlock()
		// An ack lost with the connection is a redelivery, not a loss.
		_ = d.Ack(ctx)
	})
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}

	// The relay's loop: publish in batches, publish again what was not
	// confirmed.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	publishErrs := 0
	killAfter := int64(total / 3)
	var killed *node
	next := int64(1)
	for next <= total {
		if next > killAfter && killed == nil {
			// Wait until the consumer is busy, then kill the leader.
			require.Eventually(t, func() bool { return count() >= int(killAfter)/2 }, time.Minute, 10*time.Millisecond)
			leader := queueLeader(t, ctx, nodes[0], cfg.Prefix+"notifications.send")
			for _, nd := range nodes {
				if nd.Name == leader {
					killed = nd
				}
			}
			require.NotNil(t, killed, "leader %s is none of the test's nodes", leader)
			mu.Lock()
			killedAt, afterKill = time.Now(), next
			mu.Unlock()
			killed.kill(t)
			t.Logf("killed %s, the send queue's leader, after %d events published, %d consumed", leader, next-1, count())
		}
		batch := events(next, int(min(50, total-next+1)))
		confirmed, err := pub.Publish(ctx, batch)
		require.NoError(t, ctx.Err(), "publishing took too long")
		if err != nil {
			publishErrs++
			if publishErrs%20 == 1 {
				t.Logf("publish (will publish again): %v", err)
				out, _ := nodesExcept(nodes, killed)[0].ctl(ctx, "rabbitmq-queues", "quorum_status", cfg.Prefix+"notifications.send")
				t.Logf("quorum status: %s", out)
			}
		}
		// The relay marks what was confirmed; the rest goes again, in order.
		done := map[int64]bool{}
		for _, id := range confirmed {
			done[id] = true
		}
		for _, ev := range batch {
			if !done[ev.ID] {
				break
			}
			next = ev.ID + 1
		}
	}
	require.Eventually(t, func() bool { return count() == total }, 2*time.Minute, 50*time.Millisecond,
		"events consumed: %d of %d", count())
	mu.Lock()
	gap := firstSeen.Sub(killedAt)
	mu.Unlock()
	t.Logf("lost=0 of %d events; publish errors: %d; leader stop to the first delivery of an event published after it: %s",
		total, publishErrs, gap.Round(time.Millisecond))
	require.False(t, firstSeen.IsZero(), "nothing was delivered after the kill")

	// The queue has a new leader among the nodes left.
	leader := queueLeader(t, ctx, nodesExcept(nodes, killed)[0], cfg.Prefix+"notifications.send")
	require.NotEqual(t, killed.Name, leader)
}

func nodesExcept(nodes []*node, not *node) []*node {
	var out []*node
	for _, nd := range nodes {
		if nd != not {
			out = append(out, nd)
		}
	}
	return out
}

// TestBlockedForwardDoesNotHoldAcks raises a memory alarm on a node of the
// test's own, so that the broker blocks every connection that publishes
// and stops reading from it. A retry copy published then is never
// confirmed; the acks of other deliveries must still reach the broker, so
// the consumer must not publish on the connection it consumes and acks on.
func TestBlockedForwardDoesNotHoldAcks(t *testing.T) {
	if os.Getenv(ClusterVar) != "1" {
		t.Skipf("starts a RabbitMQ node of its own: set %s=1 to run it", ClusterVar)
	}
	nd := startNodes(t, 1)[0]
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cfg := rabbitmq.Config{
		URL: nd.url(),
		Settings: consume.Settings{
			Prefix:        "blocked.",
			Prefetch:      2,
			ShutdownGrace: 10 * time.Second,
		},
		RetryDelay:     time.Minute,
		ConfirmTimeout: 3 * time.Second,
		ConnectionName: "blocked consumer",
	}
	pub := newPublisher(t, cfg)
	_, err := pub.Publish(ctx, events(1, 2))
	require.NoError(t, err)
	require.NoError(t, pub.Close())

	_, err = nd.ctl(ctx, "rabbitmqctl", "set_vm_memory_high_watermark", "0.0001")
	require.NoError(t, err)

	retried := make(chan error, 1)
	acked := make(chan error, 1)
	consumer(t, cfg, func(ctx context.Context, d notify.Delivery) {
		if d.Message().ID == 1 {
			err := d.Retry(ctx, "451 try later")
			if err != nil {
				// What the worker does with a failed retry.
				assert.NoError(t, d.Release(ctx, 0))
			}
			retried <- err
			return
		}
		// Ack only once the retry's publish has got a connection blocked.
		assert.Eventually(t, func() bool {
			out, err := nd.ctl(ctx, "rabbitmqctl", "-q", "list_connections", "name", "state")
			return err == nil && strings.Contains(out, "blocked\n")
		}, time.Minute, 100*time.Millisecond, "no connection got blocked")
		acked <- d.Ack(ctx)
	})
	require.NoError(t, <-acked)
	// The ack must be applied while the alarm is still on.
	require.Eventually(t, func() bool {
		out, err := nd.ctl(ctx, "rabbitmqctl", "-q", "list_queues", "name", "messages")
		return err == nil && strings.Contains(out, "blocked.notifications.send\t1\n")
	}, 20*time.Second, 200*time.Millisecond, "the ack of message 2 never reached the broker")
	err = <-retried
	require.Error(t, err, "a copy published on a blocked connection cannot be confirmed")
	require.ErrorContains(t, err, "not confirmed")
}
