package rabbitmq_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/transport/rabbitmq"
)

// ClusterVar enables the tests that start RabbitMQ nodes of their own from
// the installed rabbitmq-server (a three-node cluster takes a minute or more
// to start on a busy machine): HERALD_TEST_RABBITMQ_CLUSTER=1. They never
// touch the machine's node: their nodes have names, ports, data, logs and an
// Erlang cookie of their own, and are killed when the test ends.
const ClusterVar = "HERALD_TEST_RABBITMQ_CLUSTER"

// node is one RabbitMQ node started by a test.
type node struct {
	name     string // rabbit-hN-SUFFIX@localhost
	amqpPort int
	dir      string
	home     string // holds the cluster's .erlang.cookie
	bin      string // the rabbitmq-server scripts
	cmd      *exec.Cmd
	waitErr  chan error
}

// url is the node's AMQP URL.
func (n *node) url() string {
	return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.amqpPort)
}

// ctl runs rabbitmqctl (or another CLI of the scripts directory) against
// the node.
func (n *node) ctl(ctx context.Context, tool string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(n.bin, tool), append([]string{"-n", n.name}, args...)...)
	cmd.Env = n.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s on %s: %w: %s", tool, strings.Join(args, " "), n.name, err, out)
	}
	return string(out), nil
}

// env is the environment of the node's server and of the CLI run against
// it: nothing from the machine's node (its env file, config or cookie).
func (n *node) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RABBITMQ_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "ERL_") {
			env = append(env, kv)
		}
	}
	return append(env,
		"HOME="+n.home,
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(n.dir, "rabbitmq-env.conf"),
		"RABBITMQ_NODENAME="+n.name,
		"RABBITMQ_CONFIG_FILE="+filepath.Join(n.dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(n.dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(n.dir, "enabled_plugins"),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(n.dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(n.dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(n.dir, "pid"),
	)
}

// kill stops the node the hard way (SIGKILL to its process group), as a
// crashed machine would, and waits for it to be gone.
func (n *node) kill(t *testing.T) {
	t.Helper()
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-n.waitErr:
	case <-time.After(30 * time.Second):
		t.Errorf("node %s still running 30s after SIGKILL", n.name)
	}
	n.cmd = nil
}

// rabbitmqScripts is the directory of the installed rabbitmq-server
// scripts, past the wrapper on PATH that would switch to the rabbitmq user
// (and its cookie): the nodes run as the test's user.
func rabbitmqScripts(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("rabbitmq-server")
	require.NoError(t, err, "rabbitmq-server must be installed")
	real, err := filepath.EvalSymlinks(p)
	require.NoError(t, err)
	dir := filepath.Dir(real)
	for _, f := range []string{"rabbitmq-server", "rabbitmqctl", "rabbitmq-env"} {
		_, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err, "rabbitmq scripts directory %s", dir)
	}
	return dir
}

// freePort returns a loopback port nothing listens on now, outside the
// range the RabbitMQ CLI takes for its own distribution (35672-35682).
func freePort(t *testing.T) int {
	t.Helper()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		require.NoError(t, ln.Close())
		if port < 35600 || port > 35700 {
			return port
		}
	}
}

// startNodes starts n RabbitMQ nodes of the test's own and joins them into
// one cluster (n > 1). They are killed when the test ends.
func startNodes(t *testing.T, n int) []*node {
	t.Helper()
	bin := rabbitmqScripts(t)
	base := t.TempDir()
	home := filepath.Join(base, "home")
	require.NoError(t, os.MkdirAll(home, 0o700))
	cookie := "HERALDTEST" + strings.ToUpper(testenv.Suffix())
	require.NoError(t, os.WriteFile(filepath.Join(home, ".erlang.cookie"), []byte(cookie), 0o400))
	suffix := testenv.Suffix()

	nodes := make([]*node, n)
	for i := range nodes {
		nd := &node{
			name:     fmt.Sprintf("rabbit-h%d-%s@localhost", i+1, suffix),
			amqpPort: freePort(t),
			dir:      filepath.Join(base, fmt.Sprintf("n%d", i+1)),
			home:     home,
			bin:      bin,
			waitErr:  make(chan error, 1),
		}
		distPort := freePort(t)
		require.NoError(t, os.MkdirAll(nd.dir, 0o700))
		files := map[string]string{
			"rabbitmq.conf": fmt.Sprintf("listeners.tcp.1 = 127.0.0.1:%d\n", nd.amqpPort),
			// The machine's env file sets its node name; this one only
			// keeps distribution on loopback.
			"rabbitmq-env.conf": fmt.Sprintf("ERL_EPMD_ADDRESS=127.0.0.1\nDIST_PORT=%d\n", distPort) +
				`SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"` + "\n",
			"advanced.config": "[].\n",
			"enabled_plugins": "[].\n",
		}
		for f, body := range files {
			require.NoError(t, os.WriteFile(filepath.Join(nd.dir, f), []byte(body), 0o600))
		}
		out, err := os.Create(filepath.Join(nd.dir, "server.log"))
		require.NoError(t, err)
		nd.cmd = exec.Command(filepath.Join(bin, "rabbitmq-server"))
		nd.cmd.Env = append(nd.env(), "RABBITMQ_DIST_PORT="+strconv.Itoa(distPort))
		nd.cmd.Dir = nd.dir
		nd.cmd.Stdout, nd.cmd.Stderr = out, out
		nd.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		require.NoError(t, nd.cmd.Start(), "start %s", nd.name)
		cmd := nd.cmd
		go func() {
			nd.waitErr <- cmd.Wait()
			out.Close()
		}()
		t.Cleanup(func() { nd.kill(t) })
		nodes[i] = nd
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, nd := range nodes {
				for _, f := range []string{"server.log", filepath.Join("log", nd.name+".log")} {
					b, _ := os.ReadFile(filepath.Join(nd.dir, f))
					t.Logf("%s %s (tail):\n%s", nd.name, f, tail(string(b), 4000))
				}
			}
		}
	})

	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for _, nd := range nodes {
		wg.Go(func() {
			// wait, unlike await_startup, also waits for the node to appear.
			_, err := nd.ctl(ctx, "rabbitmqctl", "wait", "--timeout", "240", filepath.Join(nd.dir, "pid"))
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	require.False(t, t.Failed(), "nodes did not start")
	for _, nd := range nodes[1:] {
		for _, args := range [][]string{{"stop_app"}, {"join_cluster", nodes[0].name}, {"start_app"}} {
			_, err := nd.ctl(ctx, "rabbitmqctl", args...)
			require.NoError(t, err)
		}
	}
	return nodes
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// queueLeader names the node that leads a quorum queue.
func queueLeader(t *testing.T, ctx context.Context, via *node, queue string) string {
	t.Helper()
	out, err := via.ctl(ctx, "rabbitmqctl", "-q", "--formatter", "json", "list_queues", "name", "leader", "members")
	require.NoError(t, err)
	var qs []struct {
		Name    string   `json:"name"`
		Leader  string   `json:"leader"`
		Members []string `json:"members"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &qs), "list_queues: %s", out)
	for _, q := range qs {
		if q.Name == queue {
			require.Len(t, q.Members, 3, "queue %s must be replicated on the three nodes", queue)
			return q.Leader
		}
	}
	t.Fatalf("queue %s not found: %s", queue, out)
	return ""
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
		URL:            strings.Join(urls, ","),
		Prefix:         "cluster.",
		RetryDelay:     time.Second,
		Prefetch:       50,
		ConfirmTimeout: 10 * time.Second,
		ReconnectMin:   50 * time.Millisecond,
		ReconnectMax:   time.Second,
		ShutdownGrace:  5 * time.Second,
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
				if nd.name == leader {
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
	require.NotEqual(t, killed.name, leader)
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
		URL:            nd.url(),
		Prefix:         "blocked.",
		RetryDelay:     time.Minute,
		Prefetch:       2,
		ConfirmTimeout: 3 * time.Second,
		ConnectionName: "blocked consumer",
		ShutdownGrace:  10 * time.Second,
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
				assert.NoError(t, d.Release(ctx))
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
