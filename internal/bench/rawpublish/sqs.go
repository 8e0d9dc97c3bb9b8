package rawpublish

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// SQSOptions shapes the raw SQS publish ceiling.
type SQSOptions struct {
	// Queue is the scratch queue sent to, created and deleted afterwards
	// with its messages. Required: give it the bench's own name prefix
	// (letters, digits, - and _).
	Queue string
	// N is the number of messages. Required.
	N int
	// Window is the number of SendMessageBatch requests under way at any
	// time (each of 10 messages). Default 10: 100 messages in flight.
	Window int
}

// SQS measures bare SendMessageBatch sends per second: batches of
// ten messages, each the size of a notification.requested event with an
// outbox id attribute as herald's relay sends them, up to o.Window batches
// under way at once. It counts a message when SQS reported its entry
// stored; a refused entry or request fails the measurement.
func SQS(ctx context.Context, c *awssqs.Client, o SQSOptions) (float64, error) {
	if o.Window == 0 {
		o.Window = 10
	}
	if o.Queue == "" || o.N < 1 || o.Window < 1 {
		return 0, errors.New("raw sqs publish: want a queue, n >= 1 and window >= 1")
	}
	q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(o.Queue)})
	if err != nil {
		return 0, fmt.Errorf("raw sqs publish: create queue %s: %w", o.Queue, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		_, _ = c.DeleteQueue(dctx, &awssqs.DeleteQueueInput{QueueUrl: q.QueueUrl})
	}()
	body, err := requestedBody()
	if err != nil {
		return 0, fmt.Errorf("raw sqs publish: %w", err)
	}
	batches := (o.N + 9) / 10
	var (
		next, stored atomic.Int64
		once         sync.Once
		first        error
		wg           sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	for range min(o.Window, batches) {
		wg.Go(func() {
			for ctx.Err() == nil {
				b := int(next.Add(1)) - 1
				if b >= batches {
					return
				}
				in := &awssqs.SendMessageBatchInput{QueueUrl: q.QueueUrl}
				for i := b * 10; i < min(o.N, b*10+10); i++ {
					in.Entries = append(in.Entries, types.SendMessageBatchRequestEntry{
						Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(body)),
						MessageAttributes: map[string]types.MessageAttributeValue{
							"herald-message-id": {DataType: aws.String("Number"), StringValue: aws.String(strconv.Itoa(i + 1))},
						},
					})
				}
				out, err := c.SendMessageBatch(ctx, in)
				if err == nil && len(out.Failed) > 0 {
					err = fmt.Errorf("entry %s refused: %s", aws.ToString(out.Failed[0].Id), aws.ToString(out.Failed[0].Code))
				}
				if err != nil {
					once.Do(func() {
						first = err
						cancel()
					})
					return
				}
				stored.Add(int64(len(out.Successful)))
			}
		})
	}
	wg.Wait()
	if first != nil {
		return 0, fmt.Errorf("raw sqs publish: %w", first)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return float64(stored.Load()) / time.Since(start).Seconds(), nil
}
