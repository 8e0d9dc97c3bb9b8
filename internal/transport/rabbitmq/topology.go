package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/internal/notify"
)

// RoutingKey routes notification.requested events to the send queue. It is
// never prefixed.
const RoutingKey = notify.EventRequested

// Headers herald sets on its messages.
const (
	// HeaderRetryCount holds the number of retries before this delivery.
	HeaderRetryCount = "x-retry-count"
	// HeaderLastError holds the reason of the last failure, on retries and
	// dead letters.
	HeaderLastError = "x-last-error"
	// HeaderOccurredAt holds when the event was written, in Unix
	// microseconds.
	HeaderOccurredAt = "x-occurred-at"
)

// ErrTopologyMismatch means an exchange or queue already exists with other
// settings than the ones declared (typically a retry queue declared with a
// different retry delay). Retrying cannot cure it; an operator has to delete
// the queue or restore the setting.
var ErrTopologyMismatch = errors.New("rabbitmq topology exists with other settings")

// Topology names the exchanges and queues of one herald installation and
// carries the retry delay, the one setting the broker stores with them.
type Topology struct {
	// Exchange receives the relay's events (topic, durable).
	Exchange string
	// SendQueue is what workers consume, bound to Exchange with RoutingKey.
	SendQueue string
	// RetryQueue holds retry copies for RetryDelay, then dead-letters them
	// back to Exchange.
	RetryQueue string
	// DeadLetterExchange receives dead letters (topic, durable).
	DeadLetterExchange string
	// DeadLetterQueue keeps dead letters, bound to DeadLetterExchange with #.
	DeadLetterQueue string
	// RetryDelay is the RetryQueue's x-message-ttl.
	RetryDelay time.Duration
}

// NewTopology returns the contract's names with prefix prepended to each.
func NewTopology(prefix string, retryDelay time.Duration) Topology {
	return Topology{
		Exchange:           prefix + "notifications",
		SendQueue:          prefix + "notifications.send",
		RetryQueue:         prefix + "notifications.retry",
		DeadLetterExchange: prefix + "notifications.dlx",
		DeadLetterQueue:    prefix + "notifications.send.dlq",
		RetryDelay:         retryDelay,
	}
}

// Declare declares the whole topology. It is idempotent; when something
// already exists with other settings it fails with ErrTopologyMismatch and
// the broker closes ch.
func (t Topology) Declare(ch *amqp.Channel) error {
	for _, x := range []string{t.Exchange, t.DeadLetterExchange} {
		if err := ch.ExchangeDeclare(x, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
			return declareError("exchange", x, err)
		}
	}
	queues := []struct {
		name string
		args amqp.Table
	}{
		{t.SendQueue, amqp.Table{"x-dead-letter-exchange": t.DeadLetterExchange}},
		{t.RetryQueue, amqp.Table{
			"x-message-ttl":             t.RetryDelay.Milliseconds(),
			"x-dead-letter-exchange":    t.Exchange,
			"x-dead-letter-routing-key": RoutingKey,
		}},
		{t.DeadLetterQueue, nil},
	}
	for _, q := range queues {
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.args); err != nil {
			return declareError("queue", q.name, err)
		}
	}
	if err := ch.QueueBind(t.SendQueue, RoutingKey, t.Exchange, false, nil); err != nil {
		return fmt.Errorf("bind queue %q to exchange %q: %w", t.SendQueue, t.Exchange, err)
	}
	if err := ch.QueueBind(t.DeadLetterQueue, "#", t.DeadLetterExchange, false, nil); err != nil {
		return fmt.Errorf("bind queue %q to exchange %q: %w", t.DeadLetterQueue, t.DeadLetterExchange, err)
	}
	return nil
}

func declareError(kind, name string, err error) error {
	var aerr *amqp.Error
	if errors.As(err, &aerr) && aerr.Code == amqp.PreconditionFailed {
		hint := ""
		if kind == "queue" {
			hint = " (was the retry delay changed? delete the queue or restore the setting)"
		}
		return fmt.Errorf("declare %s %q: %w: it already exists with other arguments%s: %s",
			kind, name, ErrTopologyMismatch, hint, aerr.Reason)
	}
	return fmt.Errorf("declare %s %q: %w", kind, name, err)
}

// Delete removes the prefixed topology of cfg, messages included. Missing
// exchanges and queues are not an error. Tests clean up with it.
func Delete(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	conn, err := cfg.dial(ctx, "admin")
	if err != nil {
		return err
	}
	defer conn.Close()
	t := cfg.Topology()

	var errs []error
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	do := func(what string, op func(*amqp.Channel) error) {
		if ch == nil {
			return
		}
		err := op(ch)
		if err == nil {
			return
		}
		var aerr *amqp.Error
		if !errors.As(err, &aerr) || aerr.Code != amqp.NotFound {
			errs = append(errs, fmt.Errorf("delete %s: %w", what, err))
		}
		// A channel error closed the channel; carry on with a new one.
		if ch.IsClosed() {
			if ch, err = conn.Channel(); err != nil {
				errs = append(errs, fmt.Errorf("open channel: %w", err))
				ch = nil
			}
		}
	}
	for _, q := range []string{t.SendQueue, t.RetryQueue, t.DeadLetterQueue} {
		do("queue "+q, func(ch *amqp.Channel) error {
			_, err := ch.QueueDelete(q, false, false, false)
			return err
		})
	}
	for _, x := range []string{t.Exchange, t.DeadLetterExchange} {
		do("exchange "+x, func(ch *amqp.Channel) error { return ch.ExchangeDelete(x, false, false) })
	}
	return errors.Join(errs...)
}
