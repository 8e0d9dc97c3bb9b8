package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/heraldhq/herald/internal/transport/sqs"
	"github.com/heraldhq/herald/internal/transport/sqs/sqstest"
)

// sqsBroker is goaws inside the harness's process: the queues of herald's
// contract, reached straight.
type sqsBroker struct {
	srv *sqstest.Server
	cfg sqs.Config // straight to the server, not through the proxy
}

func (b sqsBroker) client(ctx context.Context) (*awssqs.Client, string, error) {
	c, err := b.cfg.NewClient(ctx)
	if err != nil {
		return nil, "", err
	}
	u, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(b.cfg.Topology().Send)})
	if err != nil {
		return nil, "", fmt.Errorf("find %s: %w", b.cfg.Topology().Send, err)
	}
	return c, aws.ToString(u.QueueUrl), nil
}

func (b sqsBroker) publish(ctx context.Context, msgs []rawMsg) error {
	c, url, err := b.client(ctx)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		_, err := c.SendMessage(ctx, &awssqs.SendMessageInput{
			QueueUrl: aws.String(url), MessageBody: aws.String(string(m.body)),
			MessageAttributes: map[string]types.MessageAttributeValue{
				sqs.AttrMessageID:  {DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(m.id, 10))},
				sqs.AttrType:       {DataType: aws.String("String"), StringValue: aws.String(m.typ)},
				sqs.AttrOccurredAt: {DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(m.at.UnixMicro(), 10))},
			},
		})
		if err != nil {
			return fmt.Errorf("publish %d: %w", m.id, err)
		}
	}
	return nil
}

// waiting counts what the send queue holds: new messages, retry copies
// still delayed, and those in flight.
func (b sqsBroker) waiting(ctx context.Context) (int, string, error) {
	n, _ := sqstest.Queue(b.cfg.Topology().Send)
	if n > 0 {
		return n, b.cfg.Topology().Send, nil
	}
	return 0, "", nil
}

func (b sqsBroker) deadLetters(ctx context.Context) (map[int64]bool, int, error) {
	dls, err := sqs.PeekDeadLetters(ctx, b.cfg)
	if err != nil {
		return nil, 0, err
	}
	ids := map[int64]bool{}
	for _, dl := range dls {
		if dl.ID == 0 {
			ids[-1] = true
			continue
		}
		ids[dl.ID] = true
	}
	return ids, len(dls), nil
}

func (b sqsBroker) purge(ctx context.Context) (int, error) {
	c, url, err := b.client(ctx)
	if err != nil {
		return 0, err
	}
	n, _ := sqstest.Queue(b.cfg.Topology().Send)
	if _, err := c.PurgeQueue(ctx, &awssqs.PurgeQueueInput{QueueUrl: aws.String(url)}); err != nil {
		return 0, fmt.Errorf("purge %s: %w", b.cfg.Topology().Send, err)
	}
	return n, nil
}
