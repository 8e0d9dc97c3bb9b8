package kafka_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/transport/consume"
	"github.com/heraldhq/herald/internal/transport/kafka"
	"github.com/heraldhq/herald/internal/worker"
)

var (
	_ relay.Publisher = (*kafka.Publisher)(nil)
	_ worker.Source   = (*kafka.Consumer)(nil)
)

const waitFor = 20 * time.Second

// cluster is an in-process kfake cluster whose brokers a test can kill: a
// killed broker stops listening and loses every open connection, and its
// partitions get new leaders among the others (kfake keeps one copy of the
// data, as if every replica were in sync).
type cluster struct {
	*kfake.Cluster
	addrs []string

	mu    sync.Mutex
	conns map[string][]net.Conn // by listener address
}

// newCluster starts a cluster of n brokers, closed when the test ends.
func newCluster(t *testing.T, n int) *cluster {
	t.Helper()
	c := &cluster{conns: map[string][]net.Conn{}}
	kc, err := kfake.NewCluster(kfake.NumBrokers(n), kfake.ListenFn(c.listen))
	require.NoError(t, err)
	t.Cleanup(kc.Close)
	c.Cluster = kc
	c.addrs = kc.ListenAddrs()
	return c
}

func (c *cluster) listen(network, addr string) (net.Listener, error) {
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	return &trackingListener{Listener: ln, c: c}, nil
}

type trackingListener struct {
	net.Listener
	c *cluster
}

func (l *trackingListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	addr := l.Addr().String()
	l.c.conns[addr] = append(l.c.conns[addr], conn)
	return conn, nil
}

// kill takes broker node out of the cluster the hard way: no new
// connections, open ones cut mid-request.
func (c *cluster) kill(t *testing.T, node int32) {
	t.Helper()
	require.NoError(t, c.RemoveNode(node))
	c.mu.Lock()
	defer c.mu.Unlock()
	addr := c.addrs[node]
	for _, conn := range c.conns[addr] {
		_ = conn.Close()
	}
	c.conns[addr] = nil
}

// config returns a transport configuration on the cluster with test-sized
// timings.
func (c *cluster) config(prefix string) kafka.Config {
	return kafka.Config{
		Brokers: c.addrs,
		Settings: consume.Settings{
			Prefix:        prefix,
			RetryDelays:   []time.Duration{time.Minute},
			ShutdownGrace: 10 * time.Second,
			ReconnectMin:  20 * time.Millisecond,
			ReconnectMax:  200 * time.Millisecond,
		},
		Partitions:         6,
		ConfirmTimeout:     10 * time.Second,
		CommitInterval:     50 * time.Millisecond,
		TopicCheckInterval: 500 * time.Millisecond,
		RedeliverDelay:     200 * time.Millisecond,
	}
}

func newPublisher(t *testing.T, cfg kafka.Config) *kafka.Publisher {
	t.Helper()
	p, err := kafka.NewPublisher(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

func ids(evs []notify.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// readTopic returns every record in topic, from the start to the end it
// had when called.
func readTopic(t *testing.T, cfg kafka.Config, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	cl, err := kgo.NewClient(append(cfg.ConnOpts(),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	require.NoError(t, err)
	ends, err := adm.ListEndOffsets(ctx, topic)
	require.NoError(t, err)
	want := int64(0)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			return
		}
		s, _ := starts.Lookup(o.Topic, o.Partition)
		want += o.Offset - s.Offset
	})
	var out []*kgo.Record
	for int64(len(out)) < want {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read %s: got %d of %d records", topic, len(out), want)
		out = append(out, fs.Records()...)
	}
	return out
}

// header returns a record header's value.
func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// uniquePrefix gives each test names of its own on a shared cluster.
func uniquePrefix(t *testing.T) string {
	return fmt.Sprintf("t%d.", time.Now().UnixNano())
}
