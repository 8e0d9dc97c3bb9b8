package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/transport/kafka"
)

// kafkaRun is a run's Kafka: a kfake cluster in the harness's process.
type kafkaRun struct {
	kafkaBroker
	cluster *kafkaCluster
}

// startKafkaBroker is the kafka row's start.
func startKafkaBroker(ctx context.Context, h *harness) (brokerRun, error) {
	c, err := startKafka()
	if err != nil {
		return nil, err
	}
	h.cleanups = append(h.cleanups, c.Close)
	// Kafka clients learn every broker's address from the cluster's
	// metadata: a proxy in front of the seed brokers would see only
	// the first request, so the network faults work on the brokers'
	// own connections instead.
	h.env["HERALD_BROKER_URL"] = "kafka://" + strings.Join(c.addrs, ",")
	return &kafkaRun{kafkaBroker: kafkaBroker{kc: c.Cluster, brokers: c.addrs}, cluster: c}, nil
}

// restart is broker-restart: the broker leading notifications.requested
// taken out and added back.
func (r *kafkaRun) restart(*harness) step {
	return step{name: "broker-restart", do: r.killRestore, est: 8 * time.Second}
}

func (r *kafkaRun) killRestore(ctx context.Context) (string, int, error) {
	began := time.Now()
	node, err := r.cluster.killBroker(kafka.TopicRequested)
	if err != nil {
		return "", 0, fmt.Errorf("kill broker %d: %w", node, err)
	}
	_ = sleep(ctx, faultPause)
	if err := r.cluster.restoreBroker(node); err != nil {
		return "", 0, fmt.Errorf("add broker %d back: %w", node, err)
	}
	return fmt.Sprintf("broker %d (leader of %s/0) killed, back after %.1fs", node, kafka.TopicRequested, time.Since(began).Seconds()), 0, nil
}

// cutConns is broker-reset: no proxy is in the path.
func (r *kafkaRun) cutConns() int { return r.cluster.cut("") }

// kafkaCluster is a three-broker kfake cluster in the harness's process;
// the herald processes reach it over TCP like any cluster. It tracks the
// brokers' connections, so that a fault can cut them or kill a broker.
type kafkaCluster struct {
	*kfake.Cluster
	addrs []string

	mu    sync.Mutex
	conns map[string][]net.Conn // by listener address
}

func startKafka() (*kafkaCluster, error) {
	c := &kafkaCluster{conns: map[string][]net.Conn{}}
	kc, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.ListenFn(c.listen))
	if err != nil {
		return nil, fmt.Errorf("start kfake: %w", err)
	}
	c.Cluster = kc
	c.addrs = kc.ListenAddrs()
	return c, nil
}

func (c *kafkaCluster) listen(network, addr string) (net.Listener, error) {
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	return &trackingListener{Listener: ln, c: c}, nil
}

type trackingListener struct {
	net.Listener
	c *kafkaCluster
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

// cut closes the open connections to the broker at addr ("" for every
// broker) and returns how many.
func (c *kafkaCluster) cut(addr string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for a, conns := range c.conns {
		if addr != "" && a != addr {
			continue
		}
		for _, conn := range conns {
			_ = conn.Close()
			n++
		}
		c.conns[a] = nil
	}
	return n
}

// killBroker takes the broker that leads the first partition of topic out
// of the cluster the hard way (no new connections, open ones cut), and
// returns its node id.
func (c *kafkaCluster) killBroker(topic string) (int32, error) {
	node := c.LeaderFor(topic, 0)
	if node < 0 {
		node = 0
	}
	if err := c.RemoveNode(node); err != nil {
		return node, err
	}
	c.cut(c.addrs[node])
	return node, nil
}

// restoreBroker brings node back on its old port.
func (c *kafkaCluster) restoreBroker(node int32) error {
	_, port, _ := net.SplitHostPort(c.addrs[node])
	p, _ := strconv.Atoi(port)
	_, _, err := c.AddNode(node, p)
	return err
}

// kafkaBroker is the in-process kfake cluster.
type kafkaBroker struct {
	kc      *kfake.Cluster
	brokers []string
}

func (b kafkaBroker) client(opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.brokers...)}, opts...)...)
}

func (b kafkaBroker) publish(ctx context.Context, msgs []rawMsg) error {
	cl, err := b.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	for _, m := range msgs {
		id := strconv.FormatInt(m.id, 10)
		r := &kgo.Record{
			Topic: kafka.TopicRequested,
			Key:   []byte("chaos-" + id),
			Value: m.body,
			Headers: []kgo.RecordHeader{
				{Key: kafka.HeaderMessageID, Value: []byte(id)},
				{Key: kafka.HeaderContentType, Value: []byte("application/json")},
				{Key: kafka.HeaderType, Value: []byte(m.typ)},
				{Key: kafka.HeaderOccurredAt, Value: []byte(strconv.FormatInt(m.at.UnixMicro(), 10))},
			},
		}
		pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := cl.ProduceSync(pctx, r).FirstErr()
		cancel()
		if err != nil {
			return fmt.Errorf("produce %d: %w", m.id, err)
		}
	}
	return nil
}

// waiting cannot be told on a log: what is still to do is the consumer
// group's lag, which the database already shows.
func (b kafkaBroker) waiting(ctx context.Context) (int, string, error) { return 0, "", nil }

func (b kafkaBroker) deadLetters(ctx context.Context) (map[int64]bool, int, error) {
	ids := map[int64]bool{}
	if b.kc.TopicInfo(kafka.TopicDeadLetters) == nil {
		return ids, 0, nil
	}
	// The end of each partition now: read up to there.
	ends := map[int32]int64{}
	for _, p := range b.kc.PartitionInfos(kafka.TopicDeadLetters) {
		if p.HighWatermark > 0 {
			ends[p.Partition] = p.HighWatermark
		}
	}
	if len(ends) == 0 {
		return ids, 0, nil
	}
	cl, err := b.client(kgo.ConsumeTopics(kafka.TopicDeadLetters), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, 0, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n := 0
	for len(ends) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, 0, fmt.Errorf("read the dead letters: %w", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			n++
			for _, h := range r.Headers {
				if h.Key == kafka.HeaderMessageID {
					addID(ids, string(h.Value))
				}
			}
			if end, ok := ends[r.Partition]; ok && r.Offset+1 >= end {
				delete(ends, r.Partition)
			}
		})
	}
	return ids, n, nil
}

func (b kafkaBroker) purge(ctx context.Context) (int, error) {
	n := 0
	for _, p := range b.kc.PartitionInfos(kafka.TopicRequested) {
		n += int(p.HighWatermark - p.LogStartOffset)
		if err := b.kc.DeleteRecords(kafka.TopicRequested, p.Partition, -1); err != nil {
			return n, fmt.Errorf("delete records of %s/%d: %w", kafka.TopicRequested, p.Partition, err)
		}
	}
	return n, nil
}
