package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/internal/testkit/proctest"
)

// rabbitRun is a run's RabbitMQ: a node of the harness's own (or three,
// joined into a cluster), or a scratch vhost on the --amqp broker
// (--shared-rabbitmq).
type rabbitRun struct {
	amqpBroker
	h *harness
	// nodes are the harness's own nodes; none on the shared broker.
	nodes []*proctest.RabbitNode
}

// startRabbit is the rabbitmq row's start.
func startRabbit(ctx context.Context, h *harness) (brokerRun, error) {
	r := &rabbitRun{h: h}
	var err error
	if h.o.sharedRabbit && h.nodes == 1 {
		err = r.setupShared(ctx)
	} else {
		err = r.setupOwn(ctx)
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

// setupOwn starts the harness's own RabbitMQ node (or three, joined into a
// cluster) and points herald at them, each through a fault proxy.
func (r *rabbitRun) setupOwn(ctx context.Context) error {
	h := r.h
	began := time.Now()
	nodes, err := proctest.StartRabbitNodes(ctx, filepath.Join(h.dir, "rabbitmq"), h.nodes)
	if err != nil {
		return fmt.Errorf("start RabbitMQ (%d nodes): %w", h.nodes, err)
	}
	r.nodes = nodes
	h.cleanups = append(h.cleanups, func() {
		for _, nd := range nodes {
			if err := nd.Kill(); err != nil {
				h.logf("%v", err)
			}
		}
	})
	h.logf("RabbitMQ of its own: %d node(s) up in %.1fs", len(nodes), time.Since(began).Seconds())
	var targets, urls []string
	for _, nd := range nodes {
		targets = append(targets, fmt.Sprintf("127.0.0.1:%d", nd.AMQPPort))
	}
	addrs, err := h.proxyBroker(targets)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		urls = append(urls, "amqp://guest:guest@"+a+"/")
	}
	r.url = nodes[0].URL()
	h.env["HERALD_BROKER_URL"] = strings.Join(urls, ",")
	return nil
}

// setupShared makes a scratch vhost on the --amqp broker.
func (r *rabbitRun) setupShared(ctx context.Context) error {
	h := r.h
	mu, err := url.Parse(h.o.amqp)
	if err != nil {
		return fmt.Errorf("parse --amqp: %w", err)
	}
	user := mu.User.Username()
	if user == "" {
		user = "guest"
	}
	h.vhost = "herald-chaos-" + h.runID
	if err := rabbitmqctl(ctx, "add_vhost", h.vhost); err != nil {
		return err
	}
	h.cleanups = append(h.cleanups, r.deleteVhost)
	if err := rabbitmqctl(ctx, "set_permissions", "-p", h.vhost, user, ".*", ".*", ".*"); err != nil {
		return err
	}
	mu.Path = "/" + h.vhost
	r.url = mu.String()
	addrs, err := h.proxyBroker([]string{hostPort(mu, "5672")})
	if err != nil {
		return err
	}
	viaMQ := *mu
	viaMQ.Host = addrs[0]
	h.env["HERALD_BROKER_URL"] = viaMQ.String()
	return nil
}

func (r *rabbitRun) deleteVhost() {
	h := r.h
	if h.o.keep {
		h.logf("kept vhost %s (--keep)", h.vhost)
		return
	}
	if err := rabbitmqctl(context.Background(), "delete_vhost", h.vhost); err != nil {
		h.logf("delete vhost: %v", err)
	}
}

// rabbitmqctl runs one rabbitmqctl command, bounded in time: a broker that
// does not answer must not hang the run.
func rabbitmqctl(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	return proctest.Rabbitmqctl(ctx, args...)
}

// restart is broker-restart, or kill-leader on a cluster of three.
func (r *rabbitRun) restart(h *harness) step {
	if h.nodes > 1 {
		return step{name: "kill-leader", do: r.killLeader, est: 30 * time.Second}
	}
	return step{name: "broker-restart", do: r.stopStart, est: 8 * time.Second}
}

// stopStart takes the broker down for a moment and brings it back: stop_app
// and start_app, on the harness's own node; on the shared broker with
// --shared-rabbitmq, kept short for its other users.
func (r *rabbitRun) stopStart(ctx context.Context) (string, int, error) {
	ctl := rabbitmqctl
	if len(r.nodes) > 0 {
		ctl = func(ctx context.Context, args ...string) error {
			ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			defer cancel()
			_, err := r.nodes[0].Ctl(ctx, "rabbitmqctl", args...)
			return err
		}
	}
	if err := ctl(ctx, "stop_app"); err != nil {
		// stop_app may have half-happened: make sure the broker is up.
		return "", 0, errors.Join(err, ctl(context.Background(), "start_app"))
	}
	began := time.Now()
	// start_app itself takes seconds; a short pause keeps the whole
	// window near the few seconds other users of a shared broker can bear.
	_ = sleep(ctx, brokerPause)
	if err := ctl(context.WithoutCancel(ctx), "start_app"); err != nil {
		return "", 0, err
	}
	return fmt.Sprintf("broker down %.1fs", time.Since(began).Seconds()), 0, nil
}

// killLeader kills -9 the node of the harness's cluster that leads
// notifications.send, waits until another node leads it, then starts the
// killed node again.
func (r *rabbitRun) killLeader(ctx context.Context) (string, int, error) {
	leader, _, err := proctest.QueueLeader(ctx, r.nodes[0], "", "notifications.send")
	if err != nil {
		return "", 0, err
	}
	var victim *proctest.RabbitNode
	var others []*proctest.RabbitNode
	for _, nd := range r.nodes {
		if nd.Name == leader {
			victim = nd
		} else {
			others = append(others, nd)
		}
	}
	if victim == nil {
		return "", 0, fmt.Errorf("leader %s is none of the harness's nodes", leader)
	}
	began := time.Now()
	if err := victim.Kill(); err != nil {
		return "", 0, err
	}
	r.h.logf("killed %s, the leader of notifications.send", leader)
	deadline := time.Now().Add(60 * time.Second)
	newLeader := ""
	for {
		l, _, err := proctest.QueueLeader(ctx, others[0], "", "notifications.send")
		if err == nil && l != "" && l != leader {
			newLeader = l
			break
		}
		if time.Now().After(deadline) {
			return "", 0, fmt.Errorf("no new leader of notifications.send 60s after killing %s (last: %q, %v)", leader, l, err)
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return "", 0, err
		}
	}
	elected := time.Since(began)
	if err := victim.Restart(context.WithoutCancel(ctx), 3*time.Minute); err != nil {
		return "", 0, fmt.Errorf("restart %s: %w\n%s", leader, err, victim.LogTail(2000))
	}
	return fmt.Sprintf("leader %s killed -9; %s leads after %.1fs; old leader back after %.1fs",
		leader, newLeader, elected.Seconds(), time.Since(began).Seconds()), 0, nil
}

// retryQueueDelete makes the sink refuse (451) so that retries wait in
// notifications.retry, and deletes that queue while they do. herald
// declares it again; the reconciler brings back what it held.
func (h *harness) retryQueueDelete(ctx context.Context) (string, int, error) {
	b, ok := h.br.(*rabbitRun)
	if !ok {
		return "", 0, errNotApplicable
	}
	h.sink.Fail(451, "4.3.0 chaos: try again later")
	err := sleep(ctx, 1500*time.Millisecond)
	n, derr := b.deleteRetryQueue(ctx)
	_ = sleep(ctx, faultPause-1500*time.Millisecond)
	h.sink.Fail(0, "")
	if err := errors.Join(err, derr); err != nil {
		return "", 0, err
	}
	return fmt.Sprintf("451 for %s; notifications.retry deleted with %d retries in it", faultPause, n), 0, nil
}

// amqpBroker is RabbitMQ: the queues of herald's contract on one vhost.
type amqpBroker struct{ url string }

func (b amqpBroker) channel() (*amqp.Channel, func(), error) {
	conn, err := amqp.DialConfig(b.url, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		return nil, nil, fmt.Errorf("dial broker: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("open channel: %w", err)
	}
	return ch, func() { conn.Close() }, nil
}

func (b amqpBroker) publish(ctx context.Context, msgs []rawMsg) error {
	ch, closeCh, err := b.channel()
	if err != nil {
		return err
	}
	defer closeCh()
	for _, m := range msgs {
		if err := publishConfirmed(ctx, ch, m.id, m.typ, m.body, m.at); err != nil {
			return fmt.Errorf("publish %d: %w", m.id, err)
		}
	}
	return nil
}

func (b amqpBroker) waiting(ctx context.Context) (int, string, error) {
	total, where := 0, ""
	for _, q := range []string{"notifications.send", "notifications.send.high", "notifications.retry"} {
		// A failed passive declare closes its channel: one each.
		ch, closeCh, err := b.channel()
		if err != nil {
			return 0, "", err
		}
		qi, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		closeCh()
		var aerr *amqp.Error
		if errors.As(err, &aerr) && aerr.Code == amqp.NotFound {
			// Deleted by the retry-queue fault and not declared again
			// yet: nothing waits in it.
			continue
		}
		if err != nil {
			return 0, "", fmt.Errorf("inspect %s: %w", q, err)
		}
		if qi.Messages > 0 && where == "" {
			where = q
		}
		total += qi.Messages
	}
	return total, where, nil
}

func (b amqpBroker) deadLetters(ctx context.Context) (map[int64]bool, int, error) {
	ch, closeCh, err := b.channel()
	if err != nil {
		return nil, 0, err
	}
	// Closing the channel hands every message read back to the queue.
	defer closeCh()
	ids := map[int64]bool{}
	n := 0
	for range 100000 {
		d, ok, err := ch.Get("notifications.send.dlq", false)
		if err != nil {
			return nil, 0, fmt.Errorf("read the dead letters: %w", err)
		}
		if !ok {
			break
		}
		n++
		addID(ids, d.MessageId)
	}
	return ids, n, nil
}

func (b amqpBroker) purge(ctx context.Context) (int, error) {
	ch, closeCh, err := b.channel()
	if err != nil {
		return 0, err
	}
	defer closeCh()
	n, err := ch.QueuePurge("notifications.send", false)
	if err != nil {
		return 0, fmt.Errorf("purge notifications.send: %w", err)
	}
	return n, nil
}

// deleteRetryQueue deletes notifications.retry with whatever waits in it.
func (b amqpBroker) deleteRetryQueue(ctx context.Context) (int, error) {
	ch, closeCh, err := b.channel()
	if err != nil {
		return 0, err
	}
	defer closeCh()
	n, err := ch.QueueDelete("notifications.retry", false, false, false)
	if err != nil {
		return 0, fmt.Errorf("delete notifications.retry: %w", err)
	}
	return n, nil
}

// publishConfirmed publishes a message as the relay does, to the
// notifications exchange, and waits for the broker's confirm.
func publishConfirmed(ctx context.Context, ch *amqp.Channel, id int64, typ string, body []byte, at time.Time) error {
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("confirm mode: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "notifications", "notification.requested", true, false, amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		Type:         typ,
		MessageId:    strconv.FormatInt(id, 10),
		Timestamp:    at,
		Headers:      amqp.Table{"x-occurred-at": at.UnixMicro()},
		Body:         body,
	})
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("wait for confirm: %w", err)
	}
	if !ok {
		return errors.New("broker nacked the publish")
	}
	return nil
}
