package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/transport/consume"
)

// Consumer delivers the messages of the send queue to a handler, with
// manual acknowledgement, and reconnects after outages on its own.
type Consumer struct {
	cfg  Config
	topo Topology
	log  *slog.Logger
	node rotor
}

// NewConsumer returns a Consumer. It does not connect: Consume does.
func NewConsumer(cfg Config) (*Consumer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Consumer{cfg: cfg, topo: cfg.Topology(), log: cfg.Logger}, nil
}

// Consume calls handle for each delivery of the send queue, from Prefetch
// goroutines, until ctx ends. A broker outage never ends it: it logs the
// failure, backs off and reconnects, after every handler of the lost
// connection has returned. When ctx ends it stops taking deliveries, lets
// the handlers in flight finish (their context outlives ctx by up to
// ShutdownGrace), closes the connection, handing unsettled deliveries back
// to the queue, and returns nil. It returns an error only when the broker
// holds a topology it cannot use (ErrTopologyMismatch).
func (c *Consumer) Consume(ctx context.Context, handle notify.Handler) error {
	// Handlers must be able to settle what they started after a shutdown
	// begins: their context ends only ShutdownGrace after ctx does.
	hctx, hcancel := consume.HandlerContext(ctx, c.cfg.ShutdownGrace)
	defer hcancel()

	// Retry copies and dead letters go out on a connection of their own: a
	// broker that blocks a publishing connection (flow control, a memory
	// or disk alarm) stops reading from it, and the acks of the deliveries
	// must still get through.
	fwdCfg := c.cfg
	fwdCfg.ConnectionName = c.connectionName() + " (forwards)"
	fwd := newPublisher(fwdCfg, c.topo, "consumer forwards", c.topo.Declare)
	defer fwd.Close()

	backoff := consume.Backoff{Min: c.cfg.ReconnectMin, Max: c.cfg.ReconnectMax}
	for {
		consumed, err := c.session(ctx, hctx, fwd, handle)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrTopologyMismatch) {
			return fmt.Errorf("consume: %w", err)
		}
		if consumed {
			backoff.Reset()
		}
		c.log.Warn("rabbitmq consumer disconnected; reconnecting", "err", err, "backoff", backoff.Current())
		if !backoff.Wait(ctx) {
			return nil
		}
	}
}

// session runs one connection until it fails or ctx ends. consumed reports
// whether it got as far as consuming, which resets the backoff.
func (c *Consumer) session(ctx, hctx context.Context, fwd *Publisher, handle notify.Handler) (consumed bool, err error) {
	conn, err := c.node.dial(ctx, c.cfg, "consumer")
	if err != nil {
		return false, err
	}
	defer closeConn(conn)
	connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))

	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("open channel: %w", err)
	}
	if err := c.topo.Declare(ch); err != nil {
		return false, err
	}
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return false, fmt.Errorf("set prefetch: %w", err)
	}
	// The send queue and, beside it, the high lane (HighQueue), each
	// with a consumer of its own: the prefetch is per consumer, so each
	// lane has a window of Prefetch deliveries and handlers of its own,
	// and a high delivery never waits for a place behind the send
	// queue's.
	queues := []string{c.topo.SendQueue}
	if c.topo.HighQueue != "" {
		queues = append(queues, c.topo.HighQueue)
	}
	type lane struct {
		tag        string
		deliveries <-chan amqp.Delivery
	}
	var lanes []lane
	for _, q := range queues {
		tag := "herald-" + randomHex()
		deliveries, err := ch.Consume(q, tag, false, false, false, false, nil)
		if err != nil {
			return false, fmt.Errorf("consume queue %q: %w", q, err)
		}
		lanes = append(lanes, lane{tag, deliveries})
	}

	s := &session{cfg: c.cfg, topo: c.topo, log: c.log, fwd: fwd, ch: ch}
	var wg sync.WaitGroup
	for _, l := range lanes {
		for range c.cfg.Prefetch {
			wg.Go(func() {
				for {
					select {
					case <-ctx.Done():
						return
					case d, ok := <-l.deliveries:
						if !ok {
							return
						}
						if ctx.Err() != nil {
							// Shutting down: not handled, handed back below.
							s.hold(s.delivery(d))
							return
						}
						s.dispatch(hctx, d, handle)
					}
				}
			})
		}
	}

	handlersDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(handlersDone)
	}()

	var cause error
	select {
	case <-ctx.Done():
		// Stop new deliveries; the handlers in flight settle on the open
		// channel. Once the broker confirmed the cancel the library closes
		// deliveries after handing out what it had buffered: those
		// prefetched deliveries no handler took are collected too.
		for _, l := range lanes {
			_ = ch.Cancel(l.tag, false)
		}
		for _, l := range lanes {
			for d := range l.deliveries {
				s.hold(s.delivery(d))
			}
		}
		<-handlersDone
		// Hand back every delivery left unsettled as a fresh copy rather
		// than leaving it to the connection's close: a delivery the broker
		// takes back counts towards a delivery limit (see Release).
		hbctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handBackTimeout)
		s.handBackHeld(hbctx)
		cancel()
		return true, nil
	case <-handlersDone:
		// The deliveries ended without a close: the broker cancelled the
		// consumer (its queue was deleted), or ctx ended.
		cause = errors.New("consumer cancelled by the broker")
	case e := <-connClosed:
		cause = fmt.Errorf("connection closed: %w", closeErr(e))
	case e := <-chClosed:
		cause = fmt.Errorf("consume channel closed: %w", closeErr(e))
	}
	// Closing the connection ends the deliveries; the handlers in flight
	// fail to settle and their messages come back after reconnecting.
	_ = closeConn(conn)
	<-handlersDone
	return true, cause
}

// connectionName is the name of the consume connection.
func (c *Consumer) connectionName() string {
	if c.cfg.ConnectionName != "" {
		return c.cfg.ConnectionName
	}
	return "herald consumer"
}

func closeErr(e *amqp.Error) error {
	if e == nil {
		return amqp.ErrClosed
	}
	return e
}

func randomHex() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// session is what the deliveries of one connection share.
type session struct {
	cfg  Config
	topo Topology
	log  *slog.Logger

	// fwd publishes retry copies, dead letters and hand-back copies, on a
	// connection of its own, one call at a time, so that each can tell its
	// own confirm and return apart.
	fwd *Publisher
	// ch is the channel the deliveries came on.
	ch *amqp.Channel

	// held collects the deliveries left unsettled (by their handler, or
	// never handed to one because the shutdown began), to be handed back
	// when the consumer stops.
	held consume.Held[*delivery]
}

// Hand-backs and delivery limits.
//
// A quorum queue counts the deliveries of each message: every requeue
// (basic.nack or basic.reject with requeue) and every delivery a closed
// channel or connection returns adds one (the x-delivery-count header of the
// next delivery). With a delivery limit, set by a policy or by default
// (RabbitMQ 4.0 to 4.2: 20), the broker dead-letters a message that exceeds
// it, or drops it without a dead-letter exchange. herald hands a delivery
// back without spending an attempt for as long as a provider is down, a
// store is unreachable or another delivery holds the claim, so a counted
// hand-back would dead-letter live mail while its notification stays
// pending. Therefore no hand-back of herald's counts:
//
//   - Release publishes an unchanged copy to the send queue and acks the
//     original once the copy is confirmed. A copy is a new message whose
//     count starts again at zero. Only when the copy cannot be published
//     does Release fall back to a requeue, which counts.
//   - A consumer that stops hands back the deliveries it holds unsettled the
//     same way, in one batch, instead of leaving them to the close of its
//     connection.
//   - What the broker takes back by itself (a connection lost, a process
//     killed) counts, and nothing can prevent that. A delivery that arrives
//     with x-delivery-count >= refreshAt is therefore replaced by a fresh
//     copy at once, before it is handled, so that even a worker that keeps
//     crashing or losing its connection never brings a message to a limit
//     of refreshAt or more.
//
// Declaring an x-delivery-limit of our own would not help: a policy can set
// a lower one, RabbitMQ 4 has one by default, and a changed argument on an
// existing queue fails every redeclaration (406).

// refreshAt is the x-delivery-count from which a delivery is replaced by a
// fresh copy on arrival. Two returns by the broker of one message are rare
// (each is a lost connection while the message was held), so the copy costs
// next to nothing, and the protection covers every limit of 2 or more: the
// RabbitMQ 4 default of 20 and any lower limit an operator's policy may set.
// A copy goes to the back of the queue.
const refreshAt = 2

// handBackTimeout bounds the hand-back of the held deliveries when a
// consumer stops (connecting the forwarding publisher if need be, and the
// confirms). Whatever is not confirmed by then is left to the close of the
// connection, which returns it counted once.
const handBackTimeout = 5 * time.Second

// delivery wraps d for settling.
func (s *session) delivery(d amqp.Delivery) *delivery {
	id, _ := notify.ParseID(d.MessageId)
	return &delivery{s: s, d: d, Delivered: consume.Delivered{Msg: notify.Message{
		ID:          id,
		Type:        d.Type,
		Payload:     d.Body,
		RetryCount:  retryCount(d.Headers),
		OccurredAt:  occurredAt(d),
		PublishedAt: microsHeader(d.Headers, HeaderPublishedAt),
		Traceparent: stringHeader(d.Headers, HeaderTraceparent),
		Priority:    deliveryPriority(d),
	}}}
}

// deliveryPriority is a delivery's priority as far as the broker tells:
// high when it came through the high lane or carries the high AMQP
// priority (a retry copy of a high message), normal otherwise.
func deliveryPriority(d amqp.Delivery) notify.Priority {
	if d.RoutingKey == RoutingKeyHigh || d.Priority >= highPriority {
		return notify.PriorityHigh
	}
	return ""
}

// dispatch hands one delivery to handle, unless its message id is
// unusable: then it dead-letters the message itself. A delivery the broker
// has returned refreshAt times or more is replaced by a fresh copy instead.
func (s *session) dispatch(ctx context.Context, d amqp.Delivery, handle notify.Handler) {
	dl := s.delivery(d)
	if _, ok := notify.ParseID(d.MessageId); !ok {
		if err := dl.DeadLetter(ctx, "invalid message_id"); err != nil {
			// Left unsettled, it would pin a prefetch slot until the
			// connection drops: hand it back to be tried again.
			s.log.Warn("dead-letter message with invalid message_id; handing it back", "message_id", d.MessageId, "err", err)
			if err := dl.Release(ctx, 0); err != nil {
				s.log.Warn("hand back message with invalid message_id", "message_id", d.MessageId, "err", err)
			}
		}
		return
	}
	if n := intHeader(d.Headers, headerDeliveryCount); n >= refreshAt {
		err := dl.Settle("refresh", func() error {
			cctx, cancel := context.WithTimeout(ctx, s.cfg.ConfirmTimeout)
			defer cancel()
			_, err := dl.requeueCopy(cctx)
			return err
		})
		if err == nil {
			return // the copy comes again
		}
		if s.ch.IsClosed() {
			return // the broker has taken it back
		}
		// Handled as usual: its hand-back, if any, is a copy anyway.
		s.log.Warn("replace a delivery the broker returned repeatedly with a fresh copy", "message_id", d.MessageId,
			"delivery_count", n, "err", err)
	}
	handle(ctx, dl)
	if !dl.isSettled() {
		s.hold(dl)
	}
}

// hold keeps an unsettled delivery for the hand-back at the consumer's stop.
func (s *session) hold(d *delivery) { s.held.Add(d) }

// handBackHeld hands the held deliveries back as fresh copies, published in
// one batch: each original is acked once its copy is confirmed. The others
// stay unsettled, and the close of the connection returns them.
func (s *session) handBackHeld(ctx context.Context) {
	var todo []*delivery
	for _, d := range s.held.Take() {
		if !d.isSettled() {
			todo = append(todo, d)
		}
	}
	if len(todo) == 0 || s.ch.IsClosed() {
		// With the channel gone the broker has them back already.
		return
	}
	msgs := make([]outgoing, len(todo))
	for i, d := range todo {
		msgs[i] = d.handBackCopy()
	}
	res, err := s.fwd.send(ctx, msgs)
	if err == nil {
		err = res.err
	}
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	acked := 0
	for i, d := range todo {
		if res.confirmed == nil || !res.confirmed[i] {
			continue
		}
		if err := d.Settle("hand back", func() error { return d.d.Ack(false) }); err != nil {
			errs = append(errs, fmt.Errorf("ack original after its copy was confirmed: %w", err))
			continue
		}
		acked++
	}
	if len(errs) > 0 {
		s.log.Warn("hand back unsettled deliveries as fresh copies at shutdown; the others go back counted",
			"held", len(todo), "handed_back", acked, "err", errors.Join(errs...))
	}
}

// occurredAt reads the event's time from x-occurred-at (microseconds),
// falling back to the AMQP timestamp.
func occurredAt(d amqp.Delivery) time.Time {
	if v, ok := d.Headers[HeaderOccurredAt].(int64); ok && v > 0 {
		return time.UnixMicro(v)
	}
	return d.Timestamp
}

// microsHeader reads a time in Unix microseconds; zero when absent.
func microsHeader(h amqp.Table, key string) time.Time {
	if v, ok := h[key].(int64); ok && v > 0 {
		return time.UnixMicro(v)
	}
	return time.Time{}
}

// stringHeader reads a string header; "" when absent or not a string.
func stringHeader(h amqp.Table, key string) string {
	s, _ := h[key].(string)
	return s
}

// headerDeliveryCount is where a quorum queue says how often it has
// delivered a message before (requeues and returns by a closed channel).
const headerDeliveryCount = "x-delivery-count"

// retryCount reads x-retry-count, whatever integer type the publisher chose.
func retryCount(h amqp.Table) int { return intHeader(h, HeaderRetryCount) }

// intHeader reads a non-negative integer header of any integer type (or a
// decimal string); 0 when absent or unreadable.
func intHeader(h amqp.Table, key string) int {
	var n int64
	switch v := h[key].(type) {
	case int:
		n = int64(v)
	case int8:
		n = int64(v)
	case int16:
		n = int64(v)
	case int32:
		n = int64(v)
	case int64:
		n = v
	case uint8:
		n = int64(v)
	case uint16:
		n = int64(v)
	case uint32:
		n = int64(v)
	case uint64:
		n = int64(min(v, uint64(1<<31-1)))
	case string:
		n, _ = strconv.ParseInt(v, 10, 64)
	}
	return int(max(0, min(n, 1<<31-1)))
}

// delivery implements notify.Delivery.
type delivery struct {
	s *session
	d amqp.Delivery
	consume.Delivered
}

// Ack settles the message as done. ctx is not consulted: an ack is one
// frame, sent without waiting for an answer.
func (d *delivery) Ack(ctx context.Context) error {
	return d.Settle("ack", func() error { return d.d.Ack(false) })
}

// Release hands the message back unchanged (its x-retry-count kept), as a
// fresh copy that no broker delivery limit counts (see refreshAt), and acks
// the original once the copy is confirmed (the wait bounded by
// ConfirmTimeout), so that nothing of this consumer's is held meanwhile.
// With after > 0 the copy is parked: it goes to the park queue of the
// shortest delay that is at least after (see Topology.ParkQueueFor), whose
// TTL then dead-letters it to the send queue; with after <= 0 it goes to
// the back of the send queue at once. When the park copy cannot be
// published, Release hands the message back at once instead; when no copy
// can be published, it requeues the original, which a quorum queue counts,
// and says so in the log.
func (d *delivery) Release(ctx context.Context, after time.Duration) error {
	return d.Settle("release", func() error {
		cctx, cancel := context.WithTimeout(ctx, d.s.cfg.ConfirmTimeout)
		defer cancel()
		if after > 0 {
			copied, err := d.parkCopy(cctx, after)
			if err == nil || copied {
				return err // see below
			}
			if d.s.ch.IsClosed() {
				return fmt.Errorf("%w; the broker takes the original back", err)
			}
			d.s.log.Warn("park copy not published; handing the message back at once", "message_id", d.d.MessageId,
				"after", after, "err", err)
		}
		copied, err := d.requeueCopy(cctx)
		if err == nil || copied {
			// Published but not acked: the channel is gone, and the broker
			// takes the original back by itself (a duplicate of the copy,
			// which the claim on its message id absorbs).
			return err
		}
		if d.s.ch.IsClosed() {
			return fmt.Errorf("%w; the broker takes the original back", err)
		}
		if nerr := d.d.Nack(false, true); nerr != nil {
			return errors.Join(err, fmt.Errorf("requeue original: %w", nerr))
		}
		d.s.log.Warn("hand-back copy not published; requeued the original, which counts towards a delivery limit",
			"message_id", d.d.MessageId, "err", err)
		return nil
	})
}

// parkCopy publishes an unchanged copy of the message to the park queue for
// after and acks the original once the copy is confirmed. The copy goes
// through the default exchange, straight to that queue; copied reports
// whether it was confirmed.
func (d *delivery) parkCopy(ctx context.Context, after time.Duration) (copied bool, err error) {
	if d.s.ch.IsClosed() {
		return false, fmt.Errorf("consume channel closed")
	}
	q := d.s.topo.ParkQueueFor(after)
	return d.publishThenAck(ctx, outgoing{exchange: "", key: q.Name, msg: d.publishing(copyHeaders(d.d.Headers))})
}

// requeueCopy publishes an unchanged copy of the message to the send queue
// and acks the original once the copy is confirmed. copied reports whether
// the copy was confirmed (whether or not the ack went through).
func (d *delivery) requeueCopy(ctx context.Context) (copied bool, err error) {
	if d.s.ch.IsClosed() {
		// The broker has taken the original back already; a copy would
		// be a duplicate.
		return false, fmt.Errorf("consume channel closed")
	}
	return d.publishThenAck(ctx, d.handBackCopy())
}

// handBackCopy is the unchanged copy of the message that a hand-back
// publishes: straight to the send queue, or the high lane for a high
// message (the default exchange, so that no other binding of the
// notifications exchange gets a second copy), with the same body,
// properties and headers, x-retry-count included.
func (d *delivery) handBackCopy() outgoing {
	queue := d.s.topo.SendQueue
	if d.Msg.Priority == notify.PriorityHigh && d.s.topo.HighQueue != "" {
		queue = d.s.topo.HighQueue
	}
	return outgoing{exchange: "", key: queue, msg: d.publishing(copyHeaders(d.d.Headers))}
}

// Retry publishes a copy with the retry count incremented to the retry
// queue of that retry's delay, waits for its confirm, and only then acks
// the original. If the copy is not confirmed (nacked, returned, timed out)
// Retry fails and the original stays unsettled: the caller hands it back
// with Release.
func (d *delivery) Retry(ctx context.Context, reason string) error {
	n := d.Msg.RetryCount + 1
	return d.Settle("retry", func() error {
		return d.forward(ctx, "", d.s.topo.RetryQueueFor(n), n, reason)
	})
}

// DeadLetter publishes a copy with its reason to the dead-letter exchange,
// waits for its confirm, and only then acks the original.
func (d *delivery) DeadLetter(ctx context.Context, reason string) error {
	return d.Settle("dead-letter", func() error {
		return d.forward(ctx, d.s.topo.DeadLetterExchange, RoutingKey, d.Msg.RetryCount, reason)
	})
}

// isSettled reports whether a settle method succeeded.
func (d *delivery) isSettled() bool { return d.Once.Settled() }

// forward publishes a copy of the message with retries and reason, and
// acks the original once the copy is confirmed.
func (d *delivery) forward(ctx context.Context, exchange, key string, retries int, reason string) error {
	headers := copyHeaders(d.d.Headers)
	headers[HeaderRetryCount] = int64(retries)
	headers[HeaderLastError] = consume.Truncate(reason, consume.MaxReason)
	_, err := d.publishThenAck(ctx, outgoing{exchange: exchange, key: key, msg: d.publishing(headers)})
	return err
}

// copyHeaders copies the message's headers without those the broker keeps
// itself: its dead-lettering history and its delivery count. A copy is a
// new message to the broker; a delivery count carried over would make it
// look returned already.
func copyHeaders(h amqp.Table) amqp.Table {
	out := amqp.Table{}
	for k, v := range h {
		switch k {
		case "x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason",
			"x-last-death-exchange", "x-last-death-queue", "x-last-death-reason", headerDeliveryCount:
		default:
			out[k] = v
		}
	}
	return out
}

// publishing is a persistent copy of the delivered message with headers.
func (d *delivery) publishing(headers amqp.Table) amqp.Publishing {
	return amqp.Publishing{
		Headers:         headers,
		ContentType:     d.d.ContentType,
		ContentEncoding: d.d.ContentEncoding,
		DeliveryMode:    amqp.Persistent,
		Priority:        d.d.Priority,
		CorrelationId:   d.d.CorrelationId,
		MessageId:       d.d.MessageId,
		Timestamp:       d.d.Timestamp,
		Type:            d.d.Type,
		AppId:           d.d.AppId,
		Body:            d.d.Body,
	}
}

// publishThenAck publishes msg and acks the original once msg is confirmed.
// copied reports whether msg was confirmed.
func (d *delivery) publishThenAck(ctx context.Context, msg outgoing) (copied bool, err error) {
	res, err := d.s.fwd.send(ctx, []outgoing{msg})
	if err != nil {
		return false, fmt.Errorf("copy not published, original left unsettled: %w", err)
	}
	if !res.confirmed[0] {
		return false, fmt.Errorf("copy not confirmed, original left unsettled: %w", res.err)
	}
	if err := d.d.Ack(false); err != nil {
		return true, fmt.Errorf("ack original after its copy was confirmed: %w", err)
	}
	return true, nil
}
