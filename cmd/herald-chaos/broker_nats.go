package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/heraldhq/herald/internal/testkit/proctest"
	heraldnats "github.com/heraldhq/herald/internal/transport/nats"
)

// natsRun is a run's NATS: a nats-server of the harness's own, reached
// through a fault proxy.
type natsRun struct {
	natsBroker
	srv *natsServer
}

// startNATSBroker is the nats row's start.
func startNATSBroker(ctx context.Context, h *harness) (brokerRun, error) {
	srv, err := startNATS(ctx, filepath.Join(h.dir, "nats"))
	if err != nil {
		return nil, err
	}
	h.cleanups = append(h.cleanups, srv.stop)
	addrs, err := h.proxyBroker([]string{srv.addr()})
	if err != nil {
		return nil, err
	}
	h.env["HERALD_BROKER_URL"] = "nats://" + addrs[0]
	return &natsRun{natsBroker: natsBroker{url: "nats://" + srv.addr(), top: heraldnats.NewTopology("")}, srv: srv}, nil
}

// restart is broker-restart: a kill -9 of the server and a restart on the
// same store.
func (r *natsRun) restart(*harness) step {
	return step{name: "broker-restart", do: r.killStart, est: 8 * time.Second}
}

func (r *natsRun) killStart(ctx context.Context) (string, int, error) {
	began := time.Now()
	r.srv.kill()
	_ = sleep(ctx, brokerPause)
	if err := r.srv.start(context.WithoutCancel(ctx)); err != nil {
		return "", 0, err
	}
	return fmt.Sprintf("nats-server killed -9, back after %.1fs", time.Since(began).Seconds()), 0, nil
}

// drainNote reports the acknowledged messages the stream still stores (see
// waiting).
func (r *natsRun) drainNote(ctx context.Context) string {
	if n, err := r.stale(ctx); err == nil && n > 0 {
		return fmt.Sprintf("note: %d acknowledged messages still stored on the stream's send/retry subjects (a kill -9 of nats-server lost their deletion; no consumer will get them again)", n)
	}
	return ""
}

// natsServer is a nats-server with JetStream of the harness's own, on a
// free port with its own store directory, so that the broker-restart fault
// may kill it (never the machine's server).
type natsServer struct {
	service
	port int
	dir  string
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
	return waitStarted(ctx, p, 30*time.Second, 20*time.Millisecond, func() bool { return p.LogContains("Server is ready") })
}

// natsBroker is NATS JetStream: the stream of herald's contract.
type natsBroker struct {
	url string
	top heraldnats.Topology
}

func (b natsBroker) js() (*natsgo.Conn, jetstream.JetStream, error) {
	nc, err := natsgo.Connect(b.url, natsgo.Timeout(10*time.Second), natsgo.MaxReconnects(0), natsgo.Name("herald-chaos"))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to nats: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

func (b natsBroker) publish(ctx context.Context, msgs []rawMsg) error {
	nc, js, err := b.js()
	if err != nil {
		return err
	}
	defer nc.Close()
	for _, m := range msgs {
		msg := natsgo.NewMsg(b.top.Requested)
		msg.Data = m.body
		id := strconv.FormatInt(m.id, 10)
		msg.Header.Set(heraldnats.HeaderMessageID, id)
		msg.Header.Set(heraldnats.HeaderType, m.typ)
		msg.Header.Set(heraldnats.HeaderContentType, "application/json")
		msg.Header.Set(heraldnats.HeaderOccurredAt, strconv.FormatInt(m.at.UnixMicro(), 10))
		// A Nats-Msg-Id of its own: the stream's duplicate window would
		// absorb a copy under the relay's, and the worker must meet it.
		msg.Header.Set(natsgo.MsgIdHdr, "chaos-"+id+"-"+suffix())
		pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		_, err := js.PublishMsg(pctx, msg)
		cancel()
		if err != nil {
			return fmt.Errorf("publish %d: %w", m.id, err)
		}
	}
	return nil
}

func (b natsBroker) subjects(ctx context.Context) (map[string]uint64, error) {
	nc, js, err := b.js()
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	s, err := js.Stream(ctx, b.top.Stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", b.top.Stream, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		return nil, fmt.Errorf("stream %s info: %w", b.top.Stream, err)
	}
	return info.State.Subjects, nil
}

// waiting counts what herald's two durable consumers still have to do:
// messages not yet delivered and deliveries not yet acknowledged. Not the
// stream's own count: after a kill -9 of nats-server, a work-queue stream
// was seen keeping messages its consumer had acknowledged (the ack floor
// past them, nothing pending), which no worker will ever get; they are
// reported in the log, not waited for.
func (b natsBroker) waiting(ctx context.Context) (int, string, error) {
	nc, js, err := b.js()
	if err != nil {
		return 0, "", err
	}
	defer nc.Close()
	s, err := js.Stream(ctx, b.top.Stream)
	if err != nil {
		return 0, "", fmt.Errorf("stream %s: %w", b.top.Stream, err)
	}
	n, where := 0, ""
	for _, name := range []string{b.top.WorkerConsumer, b.top.RetryConsumer} {
		c, err := s.Consumer(ctx, name)
		if err != nil {
			return 0, "", fmt.Errorf("consumer %s: %w", name, err)
		}
		ci, err := c.Info(ctx)
		if err != nil {
			return 0, "", fmt.Errorf("consumer %s info: %w", name, err)
		}
		left := int(ci.NumPending) + ci.NumAckPending
		if left > 0 && where == "" {
			where = "consumer " + name
		}
		n += left
	}
	return n, where, nil
}

// stale counts the messages left on the send and retry subjects of the
// stream once every consumer is done: messages acknowledged whose deletion
// the stream lost (see waiting).
func (b natsBroker) stale(ctx context.Context) (int, error) {
	subj, err := b.subjects(ctx)
	if err != nil {
		return 0, err
	}
	return int(subj[b.top.Requested] + subj[b.top.Retry]), nil
}

func (b natsBroker) deadLetters(ctx context.Context) (map[int64]bool, int, error) {
	nc, js, err := b.js()
	if err != nil {
		return nil, 0, err
	}
	defer nc.Close()
	s, err := js.Stream(ctx, b.top.Stream)
	if err != nil {
		return nil, 0, fmt.Errorf("stream %s: %w", b.top.Stream, err)
	}
	ids := map[int64]bool{}
	n := 0
	for seq := uint64(1); ; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(b.top.DeadLetter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return ids, n, nil
		}
		if err != nil {
			return nil, 0, fmt.Errorf("read the dead letters: %w", err)
		}
		n++
		addID(ids, m.Header.Get(heraldnats.HeaderMessageID))
		seq = m.Sequence + 1
	}
}

func (b natsBroker) purge(ctx context.Context) (int, error) {
	nc, js, err := b.js()
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	s, err := js.Stream(ctx, b.top.Stream)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", b.top.Stream, err)
	}
	before, err := s.Info(ctx, jetstream.WithSubjectFilter(b.top.Requested))
	if err != nil {
		return 0, err
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(b.top.Requested)); err != nil {
		return 0, fmt.Errorf("purge %s: %w", b.top.Requested, err)
	}
	return int(before.State.Subjects[b.top.Requested]), nil
}
