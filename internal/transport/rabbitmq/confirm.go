package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/internal/transport/consume"
)

// returnBuffer is the capacity of a confirm channel's basic.return buffer
// and therefore the largest number of messages published before their
// confirms are awaited: the client library dispatches a return before the
// ack that follows it, and only a return that found room in the buffer is
// certain to be seen by the time its ack is.
const returnBuffer = 512

// confirmChannel is a channel in confirm mode that also collects the
// messages the broker returned as unroutable.
type confirmChannel struct {
	ch      *amqp.Channel
	returns chan amqp.Return
}

// openConfirmChannel opens a channel on conn, declares on it what the
// publisher publishes to (so that publishing never races a missing
// exchange or queue) and puts it in confirm mode.
func openConfirmChannel(conn *amqp.Connection, declare func(*amqp.Channel) error) (*confirmChannel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	if err := declare(ch); err != nil {
		ch.Close()
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		ch.Close()
		return nil, fmt.Errorf("enable publisher confirms: %w", err)
	}
	return &confirmChannel{ch: ch, returns: ch.NotifyReturn(make(chan amqp.Return, returnBuffer))}, nil
}

// outgoing is one message to publish.
type outgoing struct {
	exchange, key string
	msg           amqp.Publishing
	// dropUnroutable publishes the message not mandatory: when no queue
	// is bound to its routing key the broker drops it and confirms it (the
	// status events, which no herald queue takes). Otherwise it is
	// mandatory, and an unroutable message is returned, not confirmed.
	dropUnroutable bool
}

// publishResult says what became of each message of a publish call.
type publishResult struct {
	// confirmed[i] is true when message i was acked and not returned.
	confirmed []bool
	// err says why some messages are not confirmed; nil when all are.
	err error
	// broken is true when the channel can no longer be trusted (closed,
	// failed mid-batch, or confirms still outstanding) and must be dropped.
	broken bool
	// returned is true when the broker returned a message as unroutable.
	returned bool
}

// publish publishes msgs (persistent copies are the caller's business),
// mandatory unless dropUnroutable, pipelined: every message is sent before any confirm is awaited.
// It waits for the confirms up to timeout or until ctx ends. A message the
// broker returned, nacked or did not confirm in time is not confirmed.
func (c *confirmChannel) publish(ctx context.Context, timeout time.Duration, msgs []outgoing) publishResult {
	res := publishResult{confirmed: make([]bool, len(msgs))}
	var errs []error
	for start := 0; start < len(msgs); start += returnBuffer {
		end := min(start+returnBuffer, len(msgs))
		broken, returned, err := c.publishChunk(ctx, timeout, msgs[start:end], res.confirmed[start:end])
		res.returned = res.returned || returned
		if err != nil {
			errs = append(errs, err)
		}
		if broken {
			res.broken = true
			if end < len(msgs) {
				errs = append(errs, fmt.Errorf("%d messages not published", len(msgs)-end))
			}
			break
		}
	}
	res.err = errors.Join(errs...)
	return res
}

func (c *confirmChannel) publishChunk(ctx context.Context, timeout time.Duration, msgs []outgoing, confirmed []bool) (broken, returned bool, err error) {
	// Returns left over from an earlier call belong to nobody now.
	c.drainReturns()

	var errs []error
	dcs := make([]*amqp.DeferredConfirmation, 0, len(msgs))
	for _, m := range msgs {
		dc, err := c.ch.PublishWithDeferredConfirmWithContext(ctx, m.exchange, m.key, !m.dropUnroutable, false, m.msg)
		if err != nil {
			errs = append(errs, fmt.Errorf("publish message %s: %w", m.msg.MessageId, err))
			// Unless ctx ended before the send, the channel is in doubt.
			broken = ctx.Err() == nil || c.ch.IsClosed()
			break
		}
		dcs = append(dcs, dc)
	}
	if skipped := len(msgs) - len(dcs); skipped > 0 {
		errs = append(errs, fmt.Errorf("%d of %d messages not published", skipped, len(msgs)))
	}

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var nacked, unconfirmed []string
	waiting := true
	for i, dc := range dcs {
		if waiting {
			select {
			case <-dc.Done():
			case <-timer.C:
				waiting = false
				errs = append(errs, fmt.Errorf("broker did not confirm within %s", timeout))
			case <-ctx.Done():
				waiting = false
				errs = append(errs, fmt.Errorf("wait for confirms: %w", ctx.Err()))
			}
		}
		switch {
		case dc.Acked():
			confirmed[i] = true
		case isDone(dc):
			nacked = append(nacked, msgs[i].msg.MessageId)
		default:
			unconfirmed = append(unconfirmed, msgs[i].msg.MessageId)
		}
	}
	if len(unconfirmed) > 0 {
		// Confirms still outstanding would muddle the next call.
		broken = true
		errs = append(errs, fmt.Errorf("%d messages not confirmed (%s)", len(unconfirmed), consume.SampleIDs(unconfirmed)))
	}
	if len(nacked) > 0 {
		if c.ch.IsClosed() {
			// The library nacks every pending confirm when the channel closes.
			broken = true
			errs = append(errs, fmt.Errorf("channel closed before %d messages were confirmed (%s)", len(nacked), consume.SampleIDs(nacked)))
		} else {
			errs = append(errs, fmt.Errorf("broker nacked %d messages (%s)", len(nacked), consume.SampleIDs(nacked)))
		}
	}

	// Every return precedes the ack of its message, so the returns of all
	// acked messages are in the buffer now.
	returns := map[string]amqp.Return{}
	for {
		r, ok := c.tryReturn()
		if !ok {
			break
		}
		returns[r.MessageId] = r
	}
	if len(returns) > 0 {
		var ids []string
		var first amqp.Return
		for i, m := range msgs {
			r, ok := returns[m.msg.MessageId]
			if !ok || !confirmed[i] {
				continue
			}
			confirmed[i] = false
			if len(ids) == 0 {
				first = r
			}
			ids = append(ids, m.msg.MessageId)
		}
		if len(ids) > 0 {
			returned = true
			errs = append(errs, fmt.Errorf("broker returned %d messages as unroutable (%s): %d %s (exchange %q, routing key %q)",
				len(ids), consume.SampleIDs(ids), first.ReplyCode, first.ReplyText, first.Exchange, first.RoutingKey))
		}
	}
	return broken, returned, errors.Join(errs...)
}

func (c *confirmChannel) drainReturns() {
	for {
		if _, ok := c.tryReturn(); !ok {
			return
		}
	}
}

func (c *confirmChannel) tryReturn() (amqp.Return, bool) {
	select {
	case r, ok := <-c.returns:
		return r, ok
	default:
		return amqp.Return{}, false
	}
}

func isDone(dc *amqp.DeferredConfirmation) bool {
	select {
	case <-dc.Done():
		return true
	default:
		return false
	}
}
