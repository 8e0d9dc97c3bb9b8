package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/heraldhq/herald/internal/proctest"
)

// natsServer is a nats-server with JetStream of the harness's own, on a
// free port with its own store directory, so that the broker-restart fault
// may kill it (never the machine's server).
type natsServer struct {
	port int
	dir  string
	p    *proctest.Proc
}

func startNATS(ctx context.Context, dir string) (*natsServer, error) {
	addr, err := proctest.FreeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	s := &natsServer{dir: dir}
	if s.port, err = strconv.Atoi(port); err != nil {
		return nil, err
	}
	// nats-server 2.9 races for the account's stream directory when
	// several streams are created at once on a fresh store: have it ready.
	if err := os.MkdirAll(filepath.Join(dir, "jetstream", "$G", "streams"), 0o750); err != nil {
		return nil, err
	}
	return s, s.start(ctx)
}

func (s *natsServer) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// start runs the server on its port and store and waits until it is ready.
func (s *natsServer) start(ctx context.Context) error {
	p, err := proctest.Start(proctest.Spec{
		Bin:     "nats-server",
		Args:    []string{"-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-js", "-sd", s.dir},
		Name:    "nats-server",
		LogFile: filepath.Join(filepath.Dir(s.dir), fmt.Sprintf("nats-server-%s.log", time.Now().Format("150405.000"))),
	})
	if err != nil {
		return fmt.Errorf("start nats-server (it must be on PATH): %w", err)
	}
	s.p = p
	deadline := time.Now().Add(30 * time.Second)
	for !p.LogContains("Server is ready") {
		if !p.Running() {
			return fmt.Errorf("nats-server exited at start: %v\n%s", p.Err(), p.LogTail(2000))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats-server not ready within 30s:\n%s", p.LogTail(2000))
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// kill kills the server (SIGKILL), as a crash would.
func (s *natsServer) kill() {
	if s.p != nil {
		s.p.Kill()
	}
}

func (s *natsServer) stop() {
	if s.p != nil {
		_ = s.p.Stop(15 * time.Second)
	}
}

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
