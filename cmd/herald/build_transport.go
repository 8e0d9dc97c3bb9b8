package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/deadletter"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/transport/consume"
	"github.com/heraldhq/herald/internal/transport/kafka"
	"github.com/heraldhq/herald/internal/transport/nats"
	"github.com/heraldhq/herald/internal/transport/rabbitmq"
	"github.com/heraldhq/herald/internal/transport/sqs"
	"github.com/heraldhq/herald/internal/transport/table"
	"github.com/heraldhq/herald/internal/worker"
)

// The transports: one row per broker in transports, each with its
// constructor from the configuration, and the outbox table when
// HERALD_BROKER_URL is unset (see build.go).

// transport is the broker (or the outbox table) as herald's processes use
// it. A new transport is one package plus one row in transports (and, for
// herald bench, one in benchBrokers).
type transport struct {
	// name is the transport as reports and logs name it.
	name string
	// publisher builds the relay's publisher and its close func; nil when
	// the transport has no relay (the outbox table is its own queue).
	publisher func(role string) (relay.Publisher, func(), error)
	// source builds the worker's source over st.
	source func(st store, role string) (worker.Source, error)
	// deadLetters removes redriven messages from the broker's dead letters;
	// nil when the database is the only record of them.
	deadLetters deadletter.Queue
	// deadLetterName names where the broker keeps dead letters, for
	// messages to operators.
	deadLetterName string
	// probe reports the broker's reachability; nil without a broker.
	probe api.Pinger
	// declare declares (or checks) the broker names a process uses, at
	// start: a worker's (worker true) are every name it consumes from and
	// forwards to, the retry queues whose TTLs are its retry schedule
	// included; a relay's only what it publishes to, so that it never
	// carries the workers' schedule. An error marked notify.Permanent is
	// a mismatch no retry cures; nil without a broker.
	declare func(ctx context.Context, worker bool) error
}

// transportKind is one row of the transport table: the URL schemes that
// pick it and its constructor. prefix is prepended to every broker object
// name (bench's scratch topology).
type transportKind struct {
	name    string
	schemes []string // "" alone: HERALD_BROKER_URL unset
	open    func(cfg Config, log *slog.Logger, prefix string) (transport, error)
}

// transports is the transport choice: the first row whose scheme starts
// HERALD_BROKER_URL builds the transport.
var transports = []transportKind{
	{name: "table", schemes: []string{""}, open: tableTransport},
	{name: "rabbitmq", schemes: []string{"amqp://", "amqps://"}, open: rabbitTransport},
	// nats://host:4222[,nats://host2:4222...]: the seeds of a cluster.
	{name: "nats", schemes: []string{"nats://"}, open: natsTransport},
	{name: "kafka", schemes: []string{"kafka://", "kafkas://"}, open: kafkaTransport},
	{name: "sqs", schemes: []string{"sqs://"}, open: sqsTransport},
}

// newTransport builds the transport HERALD_BROKER_URL names.
func newTransport(cfg Config, log *slog.Logger, prefix string) (transport, error) {
	k, ok := transportFor(cfg.BrokerURL)
	if !ok {
		var schemes []string
		for _, k := range transports {
			for _, s := range k.schemes {
				if s != "" {
					schemes = append(schemes, s)
				}
			}
		}
		return transport{}, usageError{fmt.Errorf("HERALD_BROKER_URL must start with %s (or be unset for the outbox table), got %q", strings.Join(schemes, ", "), redact(cfg.BrokerURL))}
	}
	return k.open(cfg, log, prefix)
}

// transportFor finds the row of a HERALD_BROKER_URL.
func transportFor(url string) (transportKind, bool) {
	for _, k := range transports {
		for _, s := range k.schemes {
			if (s == "" && url == "") || (s != "" && strings.HasPrefix(url, s)) {
				return k, true
			}
		}
	}
	return transportKind{}, false
}

// brokerKind names the transport a HERALD_BROKER_URL picks ("" for none).
func brokerKind(url string) string {
	k, _ := transportFor(url)
	return k.name
}

// tableTransport is the outbox table as the queue. Its row lease comes from
// deliveryLeases: longer than the worker's claim, so a row stays with the
// worker that claimed it until that worker has sent, recorded and settled it.
func tableTransport(cfg Config, log *slog.Logger, _ string) (transport, error) {
	_, rowLease := deliveryLeases(cfg)
	return transport{
		name: "table",
		source: func(st store, role string) (worker.Source, error) {
			return table.New(st, st, table.Config{
				Prefetch:     worker.Window(cfg.Prefetch),
				RetryDelays:  cfg.RetryDelays,
				Lease:        rowLease,
				PollInterval: cfg.RelayInterval,
				Logger:       log.With("component", role),
			})
		},
	}, nil
}

// settleMargin is what the table transport's row lease adds to the worker's
// claim lease: the time to settle the row (finish or reschedule it) after
// the record.
const settleMargin = 15 * time.Second

// deliveryLeases derives, in this one place, how long a delivery holds what
// it claims, from the longest send timeout of the channels
// (HERALD_SMTP_TIMEOUT for email): one lease serves every channel, since
// the claims of all channels go to the store together:
//   - claim: the worker's lease on the message id and the notification,
//     worker.DefaultLease: the claim's transaction, the send timeout and
//     the record's transaction, each at its longest, plus a margin. After
//     it another delivery of the notification may take the claim over and
//     send again.
//   - row: the table transport's lease on the outbox row, the claim plus
//     settleMargin. A row whose lease ran out while its send was still
//     running would be claimed again, and its retry would be neither
//     delayed nor counted (the holder's reschedule no longer matches).
//
// A delivery that may not send now (its channel's or destination's gate
// closed, its rate turn or its share of sends not come) waits in place for
// worker.Config.Patience at most, well inside settleMargin, before its
// claim; then it is parked: its row is handed back due at the time it may
// go, and holds no lease meanwhile.
func deliveryLeases(cfg Config) (claim, row time.Duration) {
	claim = worker.DefaultLease(longestSendTimeout(cfg))
	return claim, claim + settleMargin
}

func rabbitTransport(cfg Config, log *slog.Logger, prefix string) (transport, error) {
	conf := func(role string) rabbitmq.Config { return rabbitConfig(cfg, log, prefix, role) }
	return transport{
		name: "rabbitmq",
		publisher: func(role string) (relay.Publisher, func(), error) {
			p, err := rabbitmq.NewPublisher(conf(role))
			if err != nil {
				return nil, nil, err
			}
			return p, func() { _ = p.Close() }, nil
		},
		source: func(_ store, role string) (worker.Source, error) {
			return rabbitmq.NewConsumer(conf(role))
		},
		deadLetters:    rabbitDeadLetters{cfg: conf("dlq")},
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
		URL: cfg.BrokerURL,
		Settings: consume.Settings{
			Prefix:      prefix,
			RetryDelays: cfg.RetryDelays,
			Prefetch:    worker.Window(cfg.Prefetch),
			Logger:      log.With("component", role),
		},
		QueueType:      cfg.QueueType,
		ConnectionName: "herald " + role,
	}
}

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
		name: "kafka",
		publisher: func(role string) (relay.Publisher, func(), error) {
			p, err := kafka.NewPublisher(conf(role))
			if err != nil {
				return nil, nil, err
			}
			return p, func() { _ = p.Close() }, nil
		},
		source: func(_ store, role string) (worker.Source, error) {
			return kafka.NewConsumer(conf(role))
		},
		probe: kafka.Pinger{Config: base},
		// The topics carry no setting of one process: a retry's delay
		// travels in its record's headers.
		declare: func(ctx context.Context, _ bool) error { return kafka.EnsureTopics(ctx, conf("start-up check")) },
	}, nil
}

// kafkaConfig is the Kafka transport's configuration for role, on base
// (what the URL says).
func kafkaConfig(cfg Config, log *slog.Logger, base kafka.Config, prefix, role string) kafka.Config {
	c := base
	c.Prefix = prefix
	c.RetryDelays = cfg.RetryDelays
	c.Prefetch = worker.Window(cfg.Prefetch)
	c.ClientID = "herald-" + role
	c.Logger = log.With("component", role)
	return c
}

// rabbitDeadLetters removes redriven messages from the RabbitMQ dead-letter
// queue.
type rabbitDeadLetters struct{ cfg rabbitmq.Config }

func (d rabbitDeadLetters) Remove(ctx context.Context, ids []int64) (int, error) {
	return rabbitmq.RemoveDeadLetters(ctx, d.cfg, ids)
}

// natsTransport is NATS JetStream: stream NOTIFICATIONS, the relay
// publishing with acknowledgements, workers on the durable pull consumer.
func natsTransport(cfg Config, log *slog.Logger, prefix string) (transport, error) {
	conf := func(role string) nats.Config { return natsConfig(cfg, log, prefix, role) }
	return transport{
		name: "nats",
		publisher: func(role string) (relay.Publisher, func(), error) {
			p, err := nats.NewPublisher(conf(role))
			if err != nil {
				return nil, nil, err
			}
			return p, func() { _ = p.Close() }, nil
		},
		source: func(_ store, role string) (worker.Source, error) {
			return nats.NewConsumer(conf(role))
		},
		deadLetters:    natsDeadLetters{cfg: conf("dlq")},
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
		URL: cfg.BrokerURL,
		Settings: consume.Settings{
			Prefix:      prefix,
			RetryDelays: cfg.RetryDelays,
			Prefetch:    worker.Window(cfg.Prefetch),
			Logger:      log.With("component", role),
		},
		ConnectionName: "herald " + role,
	}
}

// natsDeadLetters removes redriven messages from notifications.dlq.
type natsDeadLetters struct{ cfg nats.Config }

func (d natsDeadLetters) Remove(ctx context.Context, ids []int64) (int, error) {
	return nats.RemoveDeadLetters(ctx, d.cfg, ids)
}

// sqsTransport is Amazon SQS on sqs://REGION/PREFIX[?endpoint=...&fifo=true]
// (credentials from the AWS SDK's chain): the relay sends with
// SendMessageBatch, workers long-poll PREFIX-send.
func sqsTransport(cfg Config, log *slog.Logger, prefix string) (transport, error) {
	conf, err := sqsConfig(cfg, log, prefix)
	if err != nil {
		return transport{}, err
	}
	return transport{
		name: "sqs",
		publisher: func(role string) (relay.Publisher, func(), error) {
			c := conf(role)
			p, err := sqs.NewPublisher(c)
			if err != nil {
				return nil, nil, err
			}
			return p, func() { _ = p.Close() }, nil
		},
		source: func(_ store, role string) (worker.Source, error) {
			return sqs.NewConsumer(conf(role))
		},
		deadLetters:    sqsDeadLetters{cfg: conf("dlq")},
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
	if prefix != "" {
		if base.Prefix == "" {
			base.Prefix = sqs.DefaultPrefix
		}
		base.Prefix = strings.NewReplacer(".", "-").Replace(prefix) + base.Prefix
	}
	_, row := deliveryLeases(cfg)
	base.VisibilityTimeout = row
	base.RetryDelays = cfg.RetryDelays
	base.Prefetch = worker.Window(cfg.Prefetch)
	return func(role string) sqs.Config {
		c := base
		c.Logger = log.With("component", role)
		return c
	}, nil
}

// sqsDeadLetters removes redriven messages from PREFIX-send-dlq.
type sqsDeadLetters struct{ cfg sqs.Config }

func (d sqsDeadLetters) Remove(ctx context.Context, ids []int64) (int, error) {
	return sqs.RemoveDeadLetters(ctx, d.cfg, ids)
}
