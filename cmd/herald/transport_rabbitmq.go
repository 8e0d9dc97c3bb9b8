package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/heraldhq/herald/internal/bench/rawpublish"
	"github.com/heraldhq/herald/internal/transport/rabbitmq"
)

// The RabbitMQ transport's row functions: its constructor, its
// configuration and its bench hook.

// rabbitTransport is RabbitMQ on amqp[s]://host[,host2...]: the relay
// publishing with confirms, workers on the send queue.
func rabbitTransport(cfg Config, log *slog.Logger, prefix string) (transport, error) {
	conf := func(role string) rabbitmq.Config { return rabbitConfig(cfg, log, prefix, role) }
	return transport{
		publisher:      brokerPublisher(rabbitmq.NewPublisher, conf),
		source:         brokerSource(rabbitmq.NewConsumer, conf),
		deadLetters:    brokerDeadLetters[rabbitmq.Config]{cfg: conf("dlq"), remove: rabbitmq.RemoveDeadLetters},
		deadLetterName: prefix + "notifications.send.dlq",
		probe:          rabbitmq.Pinger{URL: cfg.BrokerURL},
		declare: func(ctx context.Context, worker bool) error {
			if worker {
				return rabbitmq.DeclareTopology(ctx, conf("start-up check"))
			}
			return rabbitmq.DeclareRouteTopology(ctx, conf("start-up check"))
		},
	}, nil
}

// rabbitConfig is the RabbitMQ transport's configuration for role.
func rabbitConfig(cfg Config, log *slog.Logger, prefix, role string) rabbitmq.Config {
	// RetryDelay is the list's first delay only, until the RabbitMQ
	// transport takes the list (one retry queue per distinct delay).
	// The settings table never yields an empty list.
	return rabbitmq.Config{
		URL:            cfg.BrokerURL,
		Settings:       brokerSettings(cfg, log, prefix, role),
		QueueType:      cfg.QueueType,
		ConnectionName: "herald " + role,
	}
}

// rabbitBench is herald bench's hook of RabbitMQ: the scratch topology's
// removal and the raw publish ceiling.
func rabbitBench(cfg Config, prefix string) (benchBroker, error) {
	return benchBroker{
		remove: func(ctx context.Context) error {
			if err := rabbitmq.Delete(ctx, rabbitConfig(cfg, benchLog, prefix, "bench")); err != nil {
				return fmt.Errorf("delete broker topology %s*: %w", prefix, err)
			}
			return nil
		},
		rawPublish: func(ctx context.Context, n int) (float64, error) {
			// The ceiling of one node: the first of a cluster's list.
			first, _, _ := strings.Cut(cfg.BrokerURL, ",")
			return rawpublish.RabbitMQ(ctx, strings.TrimSpace(first), rawpublish.RabbitMQOptions{Queue: prefix + "raw", N: n, QueueType: cfg.QueueType})
		},
	}, nil
}
