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
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/internal/notify"
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
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	stopGrace := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(c.cfg.ShutdownGrace, hcancel)
		context.AfterFunc(hctx, func() { t.Stop() })
	})
	defer stopGrace()

	// Retry copies and dead letters go out on a connection of their own: a
	// broker that blocks a publishing connection (flow control, a memory
	// or disk alarm) stops reading from it, and the acks of the deliveries
	// must still get through.
	fwdCfg := c.cfg
	fwdCfg.ConnectionName = c.connectionName() + " (forwards)"
	fwd := &Publisher{cfg: fwdCfg, topo: c.topo, role: "consumer forwards"}
	defer fwd.Close()

	backoff := c.cfg.ReconnectMin
	for {
		consumed, err := c.session(ctx, hctx, fwd, handle)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrTopologyMismatch) {
			return fmt.Errorf("consume: %w", err)
		}
		if consumed {
			backoff = c.cfg.ReconnectMin
		}
		c.log.Warn("rabbitmq consumer disconnected; reconnecting", "err", err, "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(backoff*2, c.cfg.ReconnectMax)
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
	tag := "herald-" + randomHex()
	deliveries, err := ch.Consume(c.topo.SendQueue, tag, false, false, false, false, nil)
	if err != nil {
		return false, fmt.Errorf("consume queue %q: %w", c.topo.SendQueue, err)
	}

	s := &session{cfg: c.cfg, topo: c.topo, log: c.log, fwd: fwd}
	var wg sync.WaitGroup
	for range c.cfg.Prefetch {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case d, ok := <-deliveries:
					if !ok {
						return
					}
					if ctx.Err() != nil {
						// Shutting down: leave it unacked; closing the
						// channel hands it back.
						return
					}
					s.dispatch(hctx, d, handle)
				}
			}
		})
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
		// channel.
		_ = ch.Cancel(tag, false)
		<-handlersDone
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

	// fwd publishes retry copies and dead letters, on a connection of its
	// own, one call at a time, so that each can tell its own confirm and
	// return apart.
	fwd *Publisher
}

// dispatch hands one delivery to handle, unless its message id is
// unusable: then it dead-letters the message itself.
func (s *session) dispatch(ctx context.Context, d amqp.Delivery, handle notify.Handler) {
	id, ok := notify.ParseID(d.MessageId)
	dl := &delivery{s: s, d: d, msg: notify.Message{
		ID:         id,
		Type:       d.Type,
		Payload:    d.Body,
		RetryCount: retryCount(d.Headers),
		OccurredAt: occurredAt(d),
	}}
	if !ok {
		if err := dl.DeadLetter(ctx, "invalid message_id"); err != nil {
			// Left unsettled, it would pin a prefetch slot until the
			// connection drops: hand it back to be tried again.
			s.log.Warn("dead-letter message with invalid message_id; handing it back", "message_id", d.MessageId, "err", err)
			if err := dl.Release(ctx); err != nil {
				s.log.Warn("hand back message with invalid message_id", "message_id", d.MessageId, "err", err)
			}
		}
		return
	}
	handle(ctx, dl)
}

// occurredAt reads the event's time from x-occurred-at (microseconds),
// falling back to the AMQP timestamp.
func occurredAt(d amqp.Delivery) time.Time {
	if v, ok := d.Headers[HeaderOccurredAt].(int64); ok && v > 0 {
		return time.UnixMicro(v)
	}
	return d.Timestamp
}

// retryCount reads x-retry-count, whatever integer type the publisher chose.
func retryCount(h amqp.Table) int {
	var n int64
	switch v := h[HeaderRetryCount].(type) {
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

// maxReason bounds the x-last-error header.
const maxReason = 1024

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// delivery implements notify.Delivery.
type delivery struct {
	s   *session
	d   amqp.Delivery
	msg notify.Message

	// mu makes settling once hold even against a confused caller.
	mu      sync.Mutex
	settled bool
}

// Message returns the delivered message.
func (d *delivery) Message() notify.Message { return d.msg }

// Ack settles the message as done. ctx is not consulted: an ack is one
// frame, sent without waiting for an answer.
func (d *delivery) Ack(ctx context.Context) error {
	return d.settle("ack", func() error { return d.d.Ack(false) })
}

// Release hands the message back to the queue unchanged.
func (d *delivery) Release(ctx context.Context) error {
	return d.settle("release", func() error { return d.d.Nack(false, true) })
}

// Retry publishes a copy with the retry count incremented to the retry
// queue of that retry's delay, waits for its confirm, and only then acks
// the original. If the copy is not confirmed (nacked, returned, timed out)
// Retry fails and the original stays unsettled: the caller hands it back
// with Release.
func (d *delivery) Retry(ctx context.Context, reason string) error {
	n := d.msg.RetryCount + 1
	return d.settle("retry", func() error {
		return d.forward(ctx, "", d.s.topo.RetryQueueFor(n), n, reason)
	})
}

// DeadLetter publishes a copy with its reason to the dead-letter exchange,
// waits for its confirm, and only then acks the original.
func (d *delivery) DeadLetter(ctx context.Context, reason string) error {
	return d.settle("dead-letter", func() error {
		return d.forward(ctx, d.s.topo.DeadLetterExchange, RoutingKey, d.msg.RetryCount, reason)
	})
}

func (d *delivery) settle(what string, op func() error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.settled {
		return fmt.Errorf("%s message %s: already settled", what, d.d.MessageId)
	}
	// A failed settlement leaves the message unsettled, so that the caller
	// may still fall back to another (say Release after a failed Retry).
	if err := op(); err != nil {
		return fmt.Errorf("%s message %s: %w", what, d.d.MessageId, err)
	}
	d.settled = true
	return nil
}

// forward publishes a copy of the message and acks the original once the
// copy is confirmed.
func (d *delivery) forward(ctx context.Context, exchange, key string, retries int, reason string) error {
	headers := amqp.Table{}
	for k, v := range d.d.Headers {
		switch k {
		case "x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason",
			"x-last-death-exchange", "x-last-death-queue", "x-last-death-reason":
			// The broker's own dead-lettering history; it keeps it itself.
		default:
			headers[k] = v
		}
	}
	headers[HeaderRetryCount] = int64(retries)
	headers[HeaderLastError] = truncate(reason, maxReason)
	msg := outgoing{exchange: exchange, key: key, msg: amqp.Publishing{
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
	}}
	res, err := d.s.fwd.send(ctx, []outgoing{msg})
	if err != nil {
		return fmt.Errorf("copy not published, original left unsettled: %w", err)
	}
	if !res.confirmed[0] {
		return fmt.Errorf("copy not confirmed, original left unsettled: %w", res.err)
	}
	if err := d.d.Ack(false); err != nil {
		return fmt.Errorf("ack original after its copy was confirmed: %w", err)
	}
	return nil
}
