package rawpublish

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitMQOptions shapes the raw publish ceiling.
type RabbitMQOptions struct {
	// Queue is the scratch queue published to; it is declared durable and
	// deleted afterwards, with its messages. Required: give it the bench's
	// own name prefix.
	Queue string
	// N is the number of messages. Required.
	N int
	// Window is the number of messages published and not yet confirmed at
	// any time. Default 1000.
	Window int
	// QueueType is the scratch queue's x-queue-type ("quorum" or
	// "classic"), so that the ceiling is measured on the queues herald
	// uses. Default "": the broker's default, a classic queue.
	QueueType string
}

// RabbitMQ measures bare persistent publishes per second with publisher
// confirms on one channel, pipelined: up to o.Window messages in flight,
// each the size of a notification.requested event. It counts a message when
// the broker confirmed it; a nack fails the measurement.
func RabbitMQ(ctx context.Context, amqpURL string, o RabbitMQOptions) (float64, error) {
	if o.Window == 0 {
		o.Window = 1000
	}
	if o.Queue == "" || o.N < 1 || o.Window < 1 {
		return 0, fmt.Errorf("raw publish: want a queue, n >= 1 and window >= 1")
	}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName("herald bench")
	conn, err := amqp.DialConfig(amqpURL, amqp.Config{Properties: props})
	if err != nil {
		// The library's dial errors never quote the URL.
		return 0, fmt.Errorf("raw publish: dial broker: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("raw publish: open channel: %w", err)
	}
	var args amqp.Table
	if o.QueueType != "" {
		args = amqp.Table{"x-queue-type": o.QueueType}
	}
	if _, err := ch.QueueDeclare(o.Queue, true, false, false, false, args); err != nil {
		return 0, fmt.Errorf("raw publish: declare queue %q: %w", o.Queue, err)
	}
	defer func() {
		// A failed channel cannot delete: use a fresh one.
		if dch, err := conn.Channel(); err == nil {
			_, _ = dch.QueueDelete(o.Queue, false, false, false)
		}
	}()
	if err := ch.Confirm(false); err != nil {
		return 0, fmt.Errorf("raw publish: confirm mode: %w", err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, o.Window+1))

	body, err := requestedBody()
	if err != nil {
		return 0, fmt.Errorf("raw publish: %w", err)
	}
	inflight, acked := 0, 0
	await := func() error {
		select {
		case c, ok := <-confirms:
			if !ok {
				return errors.New("raw publish: channel closed while awaiting confirms")
			}
			if !c.Ack {
				return fmt.Errorf("raw publish: broker nacked message %d", c.DeliveryTag)
			}
			inflight--
			acked++
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	start := time.Now()
	for i := range o.N {
		for inflight >= o.Window {
			if err := await(); err != nil {
				return 0, err
			}
		}
		err := ch.PublishWithContext(ctx, "", o.Queue, false, false, amqp.Publishing{
			ContentType:  "application/json",
			DeliveryMode: amqp.Persistent,
			Type:         "notification.requested",
			MessageId:    strconv.Itoa(i + 1),
			Timestamp:    time.Now(),
			Body:         body,
		})
		if err != nil {
			return 0, fmt.Errorf("raw publish: publish: %w", err)
		}
		inflight++
	}
	for inflight > 0 {
		if err := await(); err != nil {
			return 0, err
		}
	}
	return float64(acked) / time.Since(start).Seconds(), nil
}
