package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/heraldhq/herald/internal/bench/rawpublish"
	"github.com/heraldhq/herald/internal/transport/nats"
)

// The NATS JetStream transport's row functions: its constructor, its
// configuration and its bench hook.

// natsTransport is NATS JetStream: stream NOTIFICATIONS, the relay
// publishing with acknowledgements, workers on the durable pull consumer.
func natsTransport(cfg Config, log *slog.Logger, prefix string) (transport, error) {
	conf := func(role string) nats.Config { return natsConfig(cfg, log, prefix, role) }
	return transport{
		publisher:      brokerPublisher(nats.NewPublisher, conf),
		source:         brokerSource(nats.NewConsumer, conf),
		deadLetters:    brokerDeadLetters[nats.Config]{cfg: conf("dlq"), remove: nats.RemoveDeadLetters},
		deadLetterName: nats.NewTopology(prefix).DeadLetter,
		probe:          nats.Pinger{URL: cfg.BrokerURL},
		// The stream carries no setting of one process: a retry's delay
		// travels in its message's headers.
		declare: func(ctx context.Context, _ bool) error { return nats.DeclareStream(ctx, conf("start-up check")) },
	}, nil
}

// natsConfig is the NATS transport's configuration for role.
func natsConfig(cfg Config, log *slog.Logger, prefix, role string) nats.Config {
	return nats.Config{
		URL:            cfg.BrokerURL,
		Settings:       brokerSettings(cfg, log, prefix, role),
		ConnectionName: "herald " + role,
	}
}

// natsBench is herald bench's hook of NATS: the scratch stream's removal
// and the raw JetStream publish ceiling.
func natsBench(cfg Config, prefix string) (benchBroker, error) {
	return benchBroker{
		remove: func(ctx context.Context) error {
			if err := nats.Delete(ctx, natsConfig(cfg, benchLog, prefix, "bench")); err != nil {
				return fmt.Errorf("delete broker stream %s*: %w", prefix, err)
			}
			return nil
		},
		rawPublish: func(ctx context.Context, n int) (float64, error) {
			topo := nats.NewTopology(prefix + "raw.")
			return rawpublish.NATS(ctx, cfg.BrokerURL, rawpublish.NATSOptions{Stream: topo.Stream, Subject: topo.Requested, N: n})
		},
	}, nil
}
