package sqs

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/heraldhq/herald/internal/transport/consume"
)

// DeadLetter is one message in the DLQ.
type DeadLetter struct {
	// ID is the outbox id (0 for a message that is not herald's).
	ID int64
	// Reason is the x-last-error attribute.
	Reason string
	// RetryCount is the x-retry-count attribute.
	RetryCount int
	// NotificationID is the notification the payload names (0 when it
	// names none).
	NotificationID int64
}

// walkDeadLetters receives every message of the DLQ (each stays invisible
// until the walk ends), calls keep for each, deletes those it says not to
// keep, and makes the others visible again. It returns how many it
// deleted.
func walkDeadLetters(ctx context.Context, cfg Config, keep func(DeadLetter) bool) (int, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return 0, err
	}
	q := &queues{cfg: cfg}
	c, _, dlq, err := q.urls(ctx)
	if err != nil {
		return 0, err
	}
	var held []types.Message
	removed := 0
	var errs []error
	for {
		out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl: aws.String(dlq), MaxNumberOfMessages: batchSize, WaitTimeSeconds: 0,
			VisibilityTimeout: 60, MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("sqs: read dead letters from %s: %w", cfg.Topology().DeadLetter, err))
			break
		}
		if len(out.Messages) == 0 {
			break
		}
		for _, m := range out.Messages {
			dl := DeadLetter{}
			if dec, err := decode(m); err == nil {
				dl.ID, dl.RetryCount = dec.msg.ID, dec.msg.RetryCount
			}
			dl.NotificationID, _ = consume.DeadLetterNotification([]byte(aws.ToString(m.Body)))
			if v, ok := m.MessageAttributes[AttrLastError]; ok {
				dl.Reason = aws.ToString(v.StringValue)
			}
			if keep(dl) {
				held = append(held, m)
				continue
			}
			if _, err := c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(dlq), ReceiptHandle: m.ReceiptHandle}); err != nil {
				errs = append(errs, fmt.Errorf("sqs: delete dead letter %d: %w", dl.ID, err))
				continue
			}
			removed++
		}
	}
	for _, m := range held {
		if _, err := c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(dlq), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0,
		}); err != nil {
			errs = append(errs, fmt.Errorf("sqs: make a dead letter visible again: %w", err))
		}
	}
	return removed, errors.Join(errs...)
}

// PeekDeadLetters lists the DLQ without removing anything. While it runs,
// the messages it read are invisible to another reader.
func PeekDeadLetters(ctx context.Context, cfg Config) ([]DeadLetter, error) {
	var out []DeadLetter
	_, err := walkDeadLetters(ctx, cfg, func(dl DeadLetter) bool {
		out = append(out, dl)
		return true
	})
	return out, err
}

// RemoveDeadLetters deletes every DLQ message whose payload names one of
// notificationIDs (herald dlq redrive: the notifications went back to
// pending with fresh outbox rows) and returns how many it deleted. A
// message whose payload names no notification stays.
func RemoveDeadLetters(ctx context.Context, cfg Config, notificationIDs []int64) (int, error) {
	if len(notificationIDs) == 0 {
		return 0, nil
	}
	want := make(map[int64]bool, len(notificationIDs))
	for _, id := range notificationIDs {
		want[id] = true
	}
	return walkDeadLetters(ctx, cfg, func(dl DeadLetter) bool { return dl.NotificationID == 0 || !want[dl.NotificationID] })
}

// Pinger checks that SQS answers and the send queue exists (or can be
// created).
type Pinger struct{ Config Config }

// Ping declares the queues (a no-op when they exist).
func (p Pinger) Ping(ctx context.Context) error {
	cfg := p.Config.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	c, err := cfg.client(ctx)
	if err != nil {
		return err
	}
	if _, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(cfg.Topology().Send)}); err != nil {
		return fmt.Errorf("sqs: find queue %s at %s: %w", cfg.Topology().Send, cfg.where(), err)
	}
	return nil
}
