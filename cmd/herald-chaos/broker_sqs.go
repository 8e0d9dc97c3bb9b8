package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/heraldhq/herald/internal/testkit/sqstest"
	"github.com/heraldhq/herald/internal/transport/sqs"
)

// startSQSBroker is the sqs row's start: goaws in this process (one per
// process: its queues are package state), so each run takes a queue prefix
// of its own.
func startSQSBroker(ctx context.Context, h *harness) (brokerRun, error) {
	srv, err := sqstest.Launch()
	if err != nil {
		return nil, fmt.Errorf("start goaws: %w", err)
	}
	for k, v := range sqstest.Credentials() {
		h.env[k] = v
	}
	addrs, err := h.proxyBroker([]string{srv.Addr()})
	if err != nil {
		return nil, err
	}
	prefix := "chaos-" + h.runID
	h.env["HERALD_BROKER_URL"] = "sqs://" + sqstest.Region + "/" + prefix + "?endpoint=http://" + addrs[0]
	cfg, err := sqs.ParseURL(srv.BrokerURL(prefix, false))
	if err != nil {
		return nil, err
	}
	h.cleanups = append(h.cleanups, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := sqs.Delete(ctx, cfg); err != nil {
			h.logf("delete queues %s-*: %v", prefix, err)
		}
	})
	return sqsBroker{srv: srv, cfg: cfg}, nil
}

// restart is broker-restart: goaws keeps its queues in memory, as SQS
// never loses them: its listener and every connection go, the queues stay.
func (b sqsBroker) restart(*harness) step {
	return step{name: "broker-restart", do: b.stopResume, est: 8 * time.Second}
}

func (b sqsBroker) stopResume(ctx context.Context) (string, int, error) {
	began := time.Now()
	if err := b.srv.Stop(); err != nil {
		return "", 0, err
	}
	_ = sleep(ctx, brokerPause)
	if err := b.srv.Resume(); err != nil {
		return "", 0, err
	}
	return fmt.Sprintf("goaws's listener and connections closed, back after %.1fs", time.Since(began).Seconds()), 0, nil
}

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

// visibilityExpiry makes every message a worker holds on SQS visible again,
// every 200ms for faultPause, as if its visibility timeout ran out while
// its send was under way: another worker receives it, and the claim on the
// message id must stop a second send. The SMTP sink answers each DATA
// after 1s meanwhile (within HERALD_SMTP_TIMEOUT), so that sends are under
// way when it strikes.
func (h *harness) visibilityExpiry(ctx context.Context) (string, int, error) {
	queue := h.br.(sqsBroker).cfg.Topology().Send
	h.sink.SetDataLatency(time.Second)
	defer h.sink.SetDataLatency(0)
	n := 0
	end := time.Now().Add(faultPause)
	for time.Now().Before(end) {
		n += sqstest.ExpireInFlight(queue)
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return "", 0, err
		}
	}
	return fmt.Sprintf("%d in-flight messages made visible again over %s (DATA answered after 1s)", n, faultPause), 0, nil
}
