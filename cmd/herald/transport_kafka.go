package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/heraldhq/herald/internal/bench/rawpublish"
	"github.com/heraldhq/herald/internal/transport/kafka"
)

// The Kafka transport's row functions: its constructor, its
// configuration and its bench hook.

// kafkaTransport is the Kafka transport on kafka://[user:pass@]host:port[,...]
// (options in kafka.ParseURL). It has no deadLetters: a Kafka topic cannot
// delete single records, so a redrive leaves notifications.dlq as it is (an
// append-only log of what died) and the database stays the record.
func kafkaTransport(cfg Config, log *slog.Logger, prefix string) (transport, error) {
	base, err := kafka.ParseURL(cfg.BrokerURL)
	if err != nil {
		return transport{}, usageError{fmt.Errorf("HERALD_BROKER_URL: %w", err)}
	}
	conf := func(role string) kafka.Config { return kafkaConfig(cfg, log, base, prefix, role) }
	return transport{
		publisher: brokerPublisher(kafka.NewPublisher, conf),
		source:    brokerSource(kafka.NewConsumer, conf),
		probe:     kafka.Pinger{Config: base},
		// The topics carry no setting of one process: a retry's delay
		// travels in its record's headers.
		declare: func(ctx context.Context, _ bool) error { return kafka.EnsureTopics(ctx, conf("start-up check")) },
	}, nil
}

// kafkaConfig is the Kafka transport's configuration for role, on base
// (what the URL says).
func kafkaConfig(cfg Config, log *slog.Logger, base kafka.Config, prefix, role string) kafka.Config {
	c := base
	c.Settings = brokerSettings(cfg, log, prefix, role)
	c.ClientID = "herald-" + role
	return c
}

// kafkaBench is herald bench's hook of Kafka: the scratch topics' removal
// and the raw produce ceiling.
func kafkaBench(cfg Config, prefix string) (benchBroker, error) {
	base, err := kafka.ParseURL(cfg.BrokerURL)
	if err != nil {
		return benchBroker{}, fmt.Errorf("HERALD_BROKER_URL: %w", err)
	}
	conf := kafkaConfig(cfg, benchLog, base, prefix, "bench")
	return benchBroker{
		remove: func(ctx context.Context) error {
			if err := kafka.Delete(ctx, conf); err != nil {
				return fmt.Errorf("delete broker topics %s*: %w", prefix, err)
			}
			return nil
		},
		rawPublish: func(ctx context.Context, n int) (float64, error) {
			return rawpublish.Kafka(ctx, conf.ConnOpts(), rawpublish.KafkaOptions{Topic: prefix + "raw", N: n})
		},
	}, nil
}
