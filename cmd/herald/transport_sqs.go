package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/heraldhq/herald/internal/bench/rawpublish"
	"github.com/heraldhq/herald/internal/transport/sqs"
)

// The Amazon SQS transport's row functions: its constructor, its
// configuration and its bench hook.

// sqsTransport is Amazon SQS on sqs://REGION/PREFIX[?endpoint=...&fifo=true]
// (credentials from the AWS SDK's chain): the relay sends with
// SendMessageBatch, workers long-poll PREFIX-send.
func sqsTransport(cfg Config, log *slog.Logger, prefix string) (transport, error) {
	conf, err := sqsConfig(cfg, log, prefix)
	if err != nil {
		return transport{}, err
	}
	return transport{
		publisher:      brokerPublisher(sqs.NewPublisher, conf),
		source:         brokerSource(sqs.NewConsumer, conf),
		deadLetters:    brokerDeadLetters[sqs.Config]{cfg: conf("dlq"), remove: sqs.RemoveDeadLetters},
		deadLetterName: conf("dlq").Topology().DeadLetter,
		probe:          sqs.Pinger{Config: conf("probe")},
		declare:        func(ctx context.Context, _ bool) error { return sqs.DeclareQueues(ctx, conf("start-up check")) },
	}, nil
}

// sqsConfig returns the SQS transport's configuration for a role. Its
// visibility timeout is the table transport's row lease (see
// deliveryLeases): longer than the worker's claim, and extended while a
// send runs, so a message reaches another worker only when its holder
// stopped extending it; that worker's claim then stops a second send. It
// follows this process's send timeouts, so the transport asks for it on
// each receive and never declares it on the queues: a relay and a worker
// with different HERALD_SMTP_TIMEOUTs share them. MaxReceiveCount, which
// is declared (the send queue's redrive policy), is left at its default
// in every process. The bench's scratch prefix (whose dots a queue name
// cannot hold) is prepended with dashes.
func sqsConfig(cfg Config, log *slog.Logger, prefix string) (func(role string) sqs.Config, error) {
	base, err := sqs.ParseURL(cfg.BrokerURL)
	if err != nil {
		return nil, usageError{fmt.Errorf("HERALD_BROKER_URL: %w", err)}
	}
	// The queues' names come from the URL's path: the scratch prefix
	// goes before them.
	queues := base.Prefix
	if prefix != "" {
		queues = strings.NewReplacer(".", "-").Replace(prefix) + cmp.Or(queues, sqs.DefaultPrefix)
	}
	_, row := deliveryLeases(cfg)
	base.VisibilityTimeout = row
	return func(role string) sqs.Config {
		c := base
		c.Settings = brokerSettings(cfg, log, "", role)
		c.Prefix = queues
		return c
	}, nil
}

// sqsBench is herald bench's hook of SQS: the scratch queues' removal and
// the raw SendMessageBatch ceiling.
func sqsBench(cfg Config, prefix string) (benchBroker, error) {
	conf, err := sqsConfig(cfg, benchLog, prefix)
	if err != nil {
		return benchBroker{}, err
	}
	c := conf("bench")
	return benchBroker{
		remove: func(ctx context.Context) error {
			if err := sqs.Delete(ctx, c); err != nil {
				return fmt.Errorf("delete broker queues %s*: %w", c.Prefix, err)
			}
			return nil
		},
		rawPublish: func(ctx context.Context, n int) (float64, error) {
			client, err := c.NewClient(ctx)
			if err != nil {
				return 0, err
			}
			return rawpublish.SQS(ctx, client, rawpublish.SQSOptions{Queue: c.Prefix + "-raw", N: n})
		},
	}, nil
}
