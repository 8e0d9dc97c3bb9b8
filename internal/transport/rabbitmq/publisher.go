package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/internal/notify"
)

// Publisher publishes outbox events to the notifications exchange and waits
// for the broker's confirms. It connects on first use and reconnects on the
// next call after a failure. It is safe for concurrent use; calls are
// serialized.
type Publisher struct {
	cfg  Config
	topo Topology
	role string
	node rotor
	// declare declares what the publisher publishes to on each
	// connection: Topology.DeclareRoute for the relay's, the whole
	// topology for a consumer's forwards (retry and park copies).
	declare func(*amqp.Channel) error

	// turn is held (a value sent into it) by the call using the
	// connection; waiting for it heeds the caller's context, so that a call
	// stuck on a broker that stopped confirming (a memory or disk alarm)
	// holds up the others no longer than their own deadlines.
	turn   chan struct{}
	closed bool
	conn   *amqp.Connection
	ch     *confirmChannel
	// redeclare is set after the broker returned a message: someone may
	// have deleted a queue, which declaring the topology again restores.
	redeclare bool
}

// NewPublisher returns a Publisher. It does not connect: the first Publish
// does. It declares what it publishes to (Topology.DeclareRoute), never
// the retry queues: the retry schedule (Config.RetryDelays) is the
// workers' and does not matter here.
func NewPublisher(cfg Config) (*Publisher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	topo := cfg.Topology()
	return newPublisher(cfg, topo, "publisher", topo.DeclareRoute), nil
}

// newPublisher returns a Publisher of a validated configuration that
// declares with declare.
func newPublisher(cfg Config, topo Topology, role string, declare func(*amqp.Channel) error) *Publisher {
	return &Publisher{cfg: cfg, topo: topo, role: role, declare: declare, turn: make(chan struct{}, 1)}
}

// Publish publishes every event (persistent, with the contract's
// properties; mandatory, except the status events notification.sent and
// notification.failed, which the broker drops when no queue is bound to
// their routing key), all of them before awaiting any confirm, and returns the ids
// of the events the broker confirmed. An event returned as unroutable,
// nacked or not confirmed within ConfirmTimeout or before ctx ends is left
// out, and err says why. After a connection or channel failure the next
// call reconnects. A topology that exists with other settings (another
// queue type; for a consumer's forwards, another retry delay too) is a
// notify.Permanent error: no retry cures it.
func (p *Publisher) Publish(ctx context.Context, events []notify.Event) ([]int64, error) {
	if len(events) == 0 {
		return nil, nil
	}
	msgs := make([]outgoing, len(events))
	now := time.Now().UnixMicro()
	for i, ev := range events {
		headers := amqp.Table{HeaderOccurredAt: ev.OccurredAt.UnixMicro(), HeaderPublishedAt: now}
		if ev.Traceparent != "" {
			headers[HeaderTraceparent] = ev.Traceparent
		}
		key, prio := ev.Type, uint8(0)
		if ev.Priority == notify.PriorityHigh && ev.Type == notify.EventRequested {
			prio = highPriority
			if p.topo.HighQueue != "" {
				key = RoutingKeyHigh
			}
		}
		msgs[i] = outgoing{
			exchange: p.topo.Exchange,
			key:      key,
			// A status event is for whoever binds a queue of their own
			// to its routing key; with nobody bound it is dropped, by
			// design, rather than held up in the outbox for ever.
			dropUnroutable: notify.IsStatusEvent(ev.Type),
			msg: amqp.Publishing{
				ContentType:  "application/json",
				DeliveryMode: amqp.Persistent,
				Priority:     prio,
				Type:         ev.Type,
				MessageId:    notify.FormatID(ev.ID),
				Timestamp:    ev.OccurredAt,
				// The AMQP timestamp has whole seconds; the header keeps
				// microseconds for the create-to-sent latency.
				Headers: headers,
				Body:    ev.Payload,
			},
		}
	}
	res, err := p.send(ctx, msgs)
	if errors.Is(err, ErrTopologyMismatch) {
		// Retrying cannot cure a topology that exists with other settings:
		// the relay stops loudly instead of stalling (notify.Permanent).
		return nil, notify.Permanent(fmt.Errorf("publish: %w", err))
	}
	if err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	confirmed := make([]int64, 0, len(events))
	for i, ok := range res.confirmed {
		if ok {
			confirmed = append(confirmed, events[i].ID)
		}
	}
	if res.err != nil {
		return confirmed, fmt.Errorf("publish %d events, %d confirmed: %w", len(events), len(confirmed), res.err)
	}
	return confirmed, nil
}

// send publishes msgs on the publisher's confirm channel, connecting
// first when needed, and drops the connection when the channel can no
// longer be trusted. err is set when nothing could be published.
func (p *Publisher) send(ctx context.Context, msgs []outgoing) (publishResult, error) {
	select {
	case p.turn <- struct{}{}:
	case <-ctx.Done():
		return publishResult{}, fmt.Errorf("wait for the connection: %w", ctx.Err())
	}
	defer func() { <-p.turn }()
	if p.closed {
		return publishResult{}, errors.New("publisher is closed")
	}
	if err := p.connect(ctx); err != nil {
		return publishResult{}, err
	}
	res := p.ch.publish(ctx, p.cfg.ConfirmTimeout, msgs)
	if res.broken {
		p.drop()
	}
	if res.returned {
		p.redeclare = true
	}
	return res, nil
}

// connect makes sure a healthy connection and confirm channel exist, with
// the topology declared on it.
func (p *Publisher) connect(ctx context.Context) error {
	if p.conn != nil && !p.conn.IsClosed() && !p.ch.ch.IsClosed() {
		if !p.redeclare {
			return nil
		}
		if err := p.declare(p.ch.ch); err != nil {
			p.drop()
			return err
		}
		p.redeclare = false
		return nil
	}
	p.drop()
	conn, err := p.node.dial(ctx, p.cfg, p.role)
	if err != nil {
		return err
	}
	ch, err := openConfirmChannel(conn, p.declare)
	if err != nil {
		_ = closeConn(conn)
		return err
	}
	p.conn, p.ch, p.redeclare = conn, ch, false
	return nil
}

// drop closes the connection, if any, so that the next call reconnects.
func (p *Publisher) drop() {
	if p.conn != nil {
		_ = closeConn(p.conn)
	}
	p.conn, p.ch = nil, nil
}

// Close closes the connection. Publish fails afterwards.
func (p *Publisher) Close() error {
	p.turn <- struct{}{}
	defer func() { <-p.turn }()
	p.closed = true
	if p.conn == nil {
		return nil
	}
	err := closeConn(p.conn)
	p.conn, p.ch = nil, nil
	if err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("close broker connection: %w", err)
	}
	return nil
}

// closeTimeout bounds the close handshake of a connection.
const closeTimeout = 5 * time.Second

// closeConn closes conn without waiting for ever: a broker that blocked the
// connection (a memory or disk alarm) no longer reads from it and would
// never answer the close, and the caller holds the lock every publish needs.
func closeConn(conn *amqp.Connection) error {
	return conn.CloseDeadline(time.Now().Add(closeTimeout))
}
