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
	"github.com/heraldhq/herald/internal/transport/table"
	"github.com/heraldhq/herald/internal/worker"
)

// The transports: one row per broker in transports, each with its
// constructor from the configuration and its bench hook (the functions of a
// broker's row are in transport_<name>.go), and the outbox table when
// HERALD_BROKER_URL is unset (see build.go).

// transport is the broker (or the outbox table) as herald's processes use
// it. A new transport is one package, one file transport_<name>.go with
// its row's functions, and one row in transports.
type transport struct {
	// name is the transport as reports and logs name it: its row's name
	// (newTransport sets it).
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
// pick it, its constructor and herald bench's hook. prefix is prepended to
// every broker object name (bench's scratch topology).
type transportKind struct {
	name    string
	schemes []string // "" alone: HERALD_BROKER_URL unset
	open    func(cfg Config, log *slog.Logger, prefix string) (transport, error)
	// bench builds what herald bench needs of the broker beyond the
	// transport; nil without a broker (the outbox table).
	bench func(cfg Config, prefix string) (benchBroker, error)
}

// benchBroker is what herald bench needs of a broker beyond the transport
// every command builds: its scratch names removed, and its raw publish
// ceiling. A binary built with -tags nobench links the hooks that make it
// but never calls them.
type benchBroker struct {
	// remove deletes the broker objects under the scratch prefix.
	remove func(ctx context.Context) error
	// rawPublish measures the broker's raw publish ceiling.
	rawPublish func(ctx context.Context, n int) (float64, error)
}

// benchLog is the logger of the configurations the bench hooks build: their
// clients log nothing the bench reports.
var benchLog = slog.New(slog.DiscardHandler)

// transports is the transport choice: the first row whose scheme starts
// HERALD_BROKER_URL builds the transport.
var transports = []transportKind{
	{name: "table", schemes: []string{""}, open: tableTransport},
	{name: "rabbitmq", schemes: []string{"amqp://", "amqps://"}, open: rabbitTransport, bench: rabbitBench},
	// nats://host:4222[,nats://host2:4222...]: the seeds of a cluster.
	{name: "nats", schemes: []string{"nats://"}, open: natsTransport, bench: natsBench},
	{name: "kafka", schemes: []string{"kafka://", "kafkas://"}, open: kafkaTransport, bench: kafkaBench},
	{name: "sqs", schemes: []string{"sqs://"}, open: sqsTransport, bench: sqsBench},
}

// brokerSettings are the settings every broker takes from the
// configuration, for role: prefix (bench's scratch names) before every
// name, the retry schedule, the prefetch window, the role's logger. The
// rest of consume.Settings keeps its defaults.
func brokerSettings(cfg Config, log *slog.Logger, prefix, role string) consume.Settings {
	return consume.Settings{
		Prefix:      prefix,
		RetryDelays: cfg.RetryDelays,
		Prefetch:    worker.Window(cfg.Prefetch),
		Logger:      log.With("component", role),
	}
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
	tr, err := k.open(cfg, log, prefix)
	if err != nil {
		return transport{}, err
	}
	tr.name = k.name
	return tr, nil
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

// brokerPublisher is a transport's publisher field for a broker whose
// package builds its publisher from a configuration of a role.
func brokerPublisher[C any, P interface {
	relay.Publisher
	Close() error
}](newPublisher func(C) (P, error), conf func(role string) C) func(role string) (relay.Publisher, func(), error) {
	return func(role string) (relay.Publisher, func(), error) {
		p, err := newPublisher(conf(role))
		if err != nil {
			return nil, nil, err
		}
		return p, func() { _ = p.Close() }, nil
	}
}

// brokerSource is a transport's source field for a broker whose package
// builds its consumer from a configuration of a role; a broker's consumer
// needs no store.
func brokerSource[C any, S worker.Source](newConsumer func(C) (S, error), conf func(role string) C) func(store, string) (worker.Source, error) {
	return func(_ store, role string) (worker.Source, error) {
		return newConsumer(conf(role))
	}
}

// brokerDeadLetters removes redriven messages from a broker's dead letters
// (RabbitMQ's and SQS's dead-letter queue, NATS's notifications.dlq) with its
// package's RemoveDeadLetters.
type brokerDeadLetters[C any] struct {
	cfg    C
	remove func(ctx context.Context, cfg C, ids []int64) (int, error)
}

func (d brokerDeadLetters[C]) Remove(ctx context.Context, ids []int64) (int, error) {
	return d.remove(ctx, d.cfg, ids)
}

// tableTransport is the outbox table as the queue. Its row lease comes from
// deliveryLeases: longer than the worker's claim, so a row stays with the
// worker that claimed it until that worker has sent, recorded and settled it.
func tableTransport(cfg Config, log *slog.Logger, _ string) (transport, error) {
	_, rowLease := deliveryLeases(cfg)
	return transport{
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
