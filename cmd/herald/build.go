package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/deadletter"
	"github.com/heraldhq/herald/internal/hostcheck"
	"github.com/heraldhq/herald/internal/monitor"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/reconcile"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/retention"
	"github.com/heraldhq/herald/internal/sender/webhook"
	"github.com/heraldhq/herald/internal/store/migrate"
	"github.com/heraldhq/herald/internal/store/mongo"
	"github.com/heraldhq/herald/internal/store/postgres"
	"github.com/heraldhq/herald/internal/store/sqlite"
	"github.com/heraldhq/herald/internal/tracing"
	"github.com/heraldhq/herald/internal/transport/kafka"
	"github.com/heraldhq/herald/internal/transport/nats"
	"github.com/heraldhq/herald/internal/transport/rabbitmq"
	"github.com/heraldhq/herald/internal/transport/sqs"
	"github.com/heraldhq/herald/internal/transport/table"
	"github.com/heraldhq/herald/internal/worker"
)

// This file is the one place that decides what runs with what: which store
// HERALD_DATABASE_URL names, which transport HERALD_BROKER_URL names, which
// sender HERALD_SMTP_URL names, and how the components are put together on
// them. Every command, herald bench included, gets its parts from build; a
// wrapper (bench's recorder) wraps built parts through hooks.

// mboxPath is where herald serve writes mail when HERALD_SMTP_URL is unset
// (the embedded default). Every other process needs HERALD_SMTP_URL, which
// may ask for an mbox file by name (mbox:PATH).
const mboxPath = "herald.mbox"

// mboxScheme prefixes an HERALD_SMTP_URL that writes mail to a file.
const mboxScheme = "mbox:"

// mailTarget returns the mbox file mail goes to (ok) or reports that
// HERALD_SMTP_URL names an SMTP server.
func mailTarget(cfg Config) (path string, ok bool) {
	switch {
	case cfg.SMTPURL == "":
		return mboxPath, true
	case strings.HasPrefix(cfg.SMTPURL, mboxScheme):
		return strings.TrimPrefix(cfg.SMTPURL, mboxScheme), true
	}
	return "", false
}

// openStore opens the store HERALD_DATABASE_URL names (url), with
// HERALD_DATABASE_DIRECT_URL (direct, PostgreSQL only). conns sizes a
// PostgreSQL pool (0: the store's default); see poolSize. Only create (serve
// and migrate) may create a SQLite file: every other command on a missing
// file says so instead of leaving an empty database behind. statusEvents
// is whether a settling record writes its status event (see
// writeStatusEvents); only a worker's records settle.
func openStore(ctx context.Context, url, direct string, conns int, create bool, tp trace.TracerProvider, statusEvents bool) (store, func(), error) {
	if direct != "" && storeKind(url) != "postgres" {
		return nil, nil, usageError{fmt.Errorf("HERALD_DATABASE_DIRECT_URL is for a PostgreSQL store behind a pooler; HERALD_DATABASE_URL is %s", redact(url))}
	}
	switch storeKind(url) {
	case "postgres":
		s, err := postgres.Open(ctx, url, postgres.Config{MaxConns: conns, TracerProvider: tp, NoStatusEvents: !statusEvents, DirectURL: direct})
		if err != nil {
			return nil, nil, fmt.Errorf("open postgres store: %w", err)
		}
		return s, s.Close, nil
	case "sqlite":
		path := sqlitePath(url)
		if path == "" {
			return nil, nil, usageError{fmt.Errorf("HERALD_DATABASE_URL %q names no file (want sqlite:PATH)", url)}
		}
		if _, err := os.Stat(path); !create && errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("database %s does not exist: run `herald migrate` (or `herald serve`, which migrates) first", path)
		}
		s, err := sqlite.Open(ctx, path, sqlite.Config{NoStatusEvents: !statusEvents})
		if err != nil {
			return nil, nil, fmt.Errorf("open sqlite store %s: %w", path, err)
		}
		return s, func() { _ = s.Close() }, nil
	case "mongodb":
		s, err := mongo.Open(ctx, url, mongo.Config{NoStatusEvents: !statusEvents})
		if err != nil {
			return nil, nil, fmt.Errorf("open mongodb store: %w", err)
		}
		return s, func() { _ = s.Close() }, nil
	default:
		return nil, nil, usageError{fmt.Errorf("HERALD_DATABASE_URL must start with postgres://, sqlite: or mongodb://, got %q", redact(url))}
	}
}

// openMigrated opens the store of a one-shot command: it must exist and be
// migrated.
func openMigrated(ctx context.Context, cfg Config) (store, func(), error) {
	st, closeStore, err := openStore(ctx, cfg.DatabaseURL, cfg.DatabaseDirectURL, 0, false, nil, true)
	if err != nil {
		return nil, nil, err
	}
	if err := checkMigrated(ctx, st); err != nil {
		closeStore()
		return nil, nil, err
	}
	return st, closeStore, nil
}

// partitionKeeper is a store whose outbox is partitioned by day
// (PostgreSQL): the partitions must exist before their day.
type partitionKeeper interface {
	EnsurePartitions(ctx context.Context) error
}

// ensurePartitions makes the outbox partitions of today and the days ahead
// on a store that has them, before the process serves: a deployment that
// was stopped for longer than the partitions reach finds today's made
// before its first create. A process whose database role may not create
// tables fails only when the present day has no partition (see
// postgres.ErrNoPartitionNow).
// Any other failure is logged: creates work today, and the retention
// passes try again.
func ensurePartitions(ctx context.Context, st store, log *slog.Logger) error {
	p, ok := st.(partitionKeeper)
	if !ok {
		return nil
	}
	err := p.EnsurePartitions(ctx)
	if err == nil || errors.Is(err, postgres.ErrNoPartitionNow) {
		return err
	}
	log.Warn("could not make the outbox partitions of the days ahead", "err", err)
	return nil
}

// checkMigrated fails unless every migration this binary ships is applied.
func checkMigrated(ctx context.Context, st store) error {
	states, err := st.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	return migrate.Check(states)
}

// writeStatusEvents decides HERALD_STATUS_EVENTS: whether the records
// that settle notifications write their status events. auto writes them
// when they have a destination: a broker (other services bind to them
// there), or HERALD_STATUS_WEBHOOK_URL. On the outbox table without a
// status webhook nobody receives them, and each would cost an outbox row
// that a status relay only marks processed. on always writes them, off
// never; off with HERALD_STATUS_WEBHOOK_URL is a contradiction, refused.
func writeStatusEvents(cfg Config) (bool, error) {
	switch cfg.StatusEvents {
	case "on":
		return true, nil
	case "off":
		if cfg.StatusWebhookURL != "" {
			return false, usageError{errors.New("HERALD_STATUS_EVENTS=off writes no status events, so HERALD_STATUS_WEBHOOK_URL would never receive one: unset HERALD_STATUS_WEBHOOK_URL, or set HERALD_STATUS_EVENTS to auto or on")}
		}
		return false, nil
	}
	return cfg.BrokerURL != "" || cfg.StatusWebhookURL != "", nil
}

// schemaCheck is the readiness check "the database is migrated".
type schemaCheck struct{ st store }

func (c schemaCheck) Ping(ctx context.Context) error { return checkMigrated(ctx, c.st) }

// storeKind names the engine a HERALD_DATABASE_URL picks: "postgres",
// "sqlite", "mongodb", or "" for none.
func storeKind(url string) string {
	switch {
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		return "postgres"
	case strings.HasPrefix(url, "sqlite:"):
		return "sqlite"
	case strings.HasPrefix(url, "mongodb://"), strings.HasPrefix(url, "mongodb+srv://"):
		return "mongodb"
	}
	return ""
}

// sqlitePath is the file of a sqlite:PATH (or sqlite://PATH) URL.
func sqlitePath(url string) string {
	return strings.TrimPrefix(strings.TrimPrefix(url, "sqlite:"), "//")
}

// poolSize is the PostgreSQL pool of a long-running process. Every
// transaction herald runs is short: no connection is held across a send (a
// worker claims, commits, sends, then records), and a worker's concurrent
// deliveries share one claim and one record transaction at a time. So the
// pool does not follow HERALD_PREFETCH: it serves the API's concurrent
// creates, the relay, and the worker's two grouped statements.
func poolSize(Config) int {
	return 10
}

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
		URL:            cfg.BrokerURL,
		Prefix:         prefix,
		RetryDelays:    cfg.RetryDelays,
		QueueType:      cfg.QueueType,
		Prefetch:       worker.Window(cfg.Prefetch),
		ConnectionName: "herald " + role,
		Logger:         log.With("component", role),
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
		URL:            cfg.BrokerURL,
		Prefix:         prefix,
		RetryDelays:    cfg.RetryDelays,
		Prefetch:       worker.Window(cfg.Prefetch),
		ConnectionName: "herald " + role,
		Logger:         log.With("component", role),
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

// hooks change how build puts the parts together without building any of
// them: herald bench uses them; the commands pass the zero value.
type hooks struct {
	// prefix is prepended to every broker object name.
	prefix string
	// quiet logs warnings and errors only, whatever HERALD_LOG_LEVEL says.
	quiet bool
	// listener, when set, is where the API serves instead of HERALD_HTTP_ADDR.
	listener net.Listener
	// wrapPublisher and wrapSender, when set, wrap the relay's publisher and
	// the worker's sender.
	wrapPublisher func(relay.Publisher) relay.Publisher
	wrapSender    func(worker.Sender) worker.Sender
	// role names the process in its traces' resource (herald.role).
	role string
}

// app is one herald process: its configuration, logger, metrics registry,
// store and transport, and what to close when it stops.
type app struct {
	cfg   Config
	log   *slog.Logger
	reg   *prometheus.Registry
	st    store
	tr    transport
	hooks hooks
	close []func()
	// tp is the process's tracer provider; nil while tracing is off (no
	// OTLP endpoint set), and then no part makes a span.
	tp trace.TracerProvider
	// checks are the readiness checks of the parts built so far (a relay
	// that stopped on a permanent error says so).
	checks []api.Check
	// statusEvents is whether the store writes status events (see
	// writeStatusEvents).
	statusEvents bool
}

// build opens the store and the transport cfg names; with migrate it also
// applies the migrations.
func build(ctx context.Context, cfg Config, e env, h hooks, migrate bool) (*app, error) {
	log := newLogger(cfg, e)
	if h.quiet {
		log = slog.New(tracing.NewLogHandler(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	}
	tp, closeTracing, err := newTracerProvider(e.getenv, h.role)
	if err != nil {
		return nil, err
	}
	// The refusal of off with a status webhook is runProcess's, for the
	// processes that take both settings; here off writes none.
	statusEvents, _ := writeStatusEvents(cfg)
	tr, err := newTransport(cfg, log, h.prefix)
	if err != nil {
		closeTracing()
		return nil, err
	}
	if migrate && storeKind(cfg.DatabaseURL) == "sqlite" {
		if _, err := os.Stat(sqlitePath(cfg.DatabaseURL)); errors.Is(err, fs.ErrNotExist) {
			log.Info("creating a new SQLite database", "path", sqlitePath(cfg.DatabaseURL))
		}
	}
	st, closeStore, err := openStore(ctx, cfg.DatabaseURL, cfg.DatabaseDirectURL, poolSize(cfg), migrate, tp, statusEvents)
	if err != nil {
		closeTracing()
		return nil, err
	}
	// Closed last: the spans of the parts' last work are flushed.
	a := &app{cfg: cfg, log: log, st: st, tr: tr, hooks: h, tp: tp, close: []func(){closeTracing, closeStore}, statusEvents: statusEvents}
	check := checkMigrated
	if migrate {
		check = func(ctx context.Context, st store) error { return st.Migrate(ctx) }
	}
	if err := check(ctx, st); err != nil {
		a.Close()
		// The start-up record is not out yet: say which database.
		return nil, fmt.Errorf("database %s: %w", where(cfg.DatabaseURL), err)
	}
	if err := ensurePartitions(ctx, st, log); err != nil {
		a.Close()
		return nil, fmt.Errorf("database %s: %w", where(cfg.DatabaseURL), err)
	}
	logPooler(ctx, st, cfg, log)
	a.reg = prometheus.NewRegistry()
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return a, nil
}

// logPooler says, for a PostgreSQL store behind a pooler in transaction
// mode, how the process's wake-ups and partition drops work through it
// (docs/production.md, "PostgreSQL through a pooler").
func logPooler(ctx context.Context, st store, cfg Config, log *slog.Logger) {
	p, ok := st.(interface {
		Pooled(context.Context) (bool, error)
	})
	if !ok {
		return
	}
	if pooled, err := p.Pooled(ctx); err != nil || !pooled {
		return
	}
	if cfg.DatabaseDirectURL != "" {
		log.Info("database behind a pooler: LISTEN and the drop of old outbox partitions use HERALD_DATABASE_DIRECT_URL",
			"direct", where(cfg.DatabaseDirectURL))
		return
	}
	log.Info("database behind a pooler and no HERALD_DATABASE_DIRECT_URL: relays and table workers poll every HERALD_RELAY_INTERVAL, old outbox partitions are kept",
		"HERALD_RELAY_INTERVAL", cfg.RelayInterval.String())
}

// Close releases what the app opened, newest first.
func (a *app) Close() {
	for i := len(a.close) - 1; i >= 0; i-- {
		a.close[i]()
	}
}

// role is one of the long-running parts of herald.
type role string

const (
	roleAPI    role = "api"
	roleRelay  role = "relay"
	roleWorker role = "worker"
)

// parts builds the long-running parts of the named roles. A relay is built
// only when the transport has one (serve on the outbox table runs none).
func (a *app) parts(roles ...role) ([]func(context.Context) error, error) {
	var out []func(context.Context) error
	for _, r := range roles {
		switch r {
		case roleAPI:
			p, err := a.apiParts()
			if err != nil {
				return nil, err
			}
			out = append(out, p...)
		case roleRelay:
			if a.tr.publisher == nil {
				continue
			}
			rls, err := a.newRelays()
			if err != nil {
				return nil, err
			}
			for _, rl := range rls {
				out = append(out, rl.Run)
			}
		case roleWorker:
			w, err := a.newWorker()
			if err != nil {
				return nil, err
			}
			out = append(out, w.Run)
			if a.tr.publisher == nil {
				// The outbox table has no relay for the notifications;
				// the status events get theirs where the workers run.
				// A worker that writes none only clears what an earlier
				// run left.
				rl, err := a.newStatusRelay(nil)
				if err != nil {
					return nil, err
				}
				if a.statusEvents {
					out = append(out, rl.Run)
				} else {
					out = append(out, drainStatus(rl, a.cfg.RelayBatch, a.cfg.RelayInterval))
				}
			}
		}
	}
	return out, nil
}

func (a *app) metricsHandler() http.Handler {
	// OpenMetrics when the scraper asks for it (Prometheus does): the only
	// exposition that carries the histograms' trace exemplars.
	return promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{Registry: a.reg, EnableOpenMetrics: true})
}

// apiHandler builds the HTTP API.
func (a *app) apiHandler() (http.Handler, error) {
	// The API's readiness never depends on the broker: the outbox exists
	// to take creates while it is down.
	checks := []api.Check{{Name: "store", Pinger: a.st}, {Name: "schema", Pinger: schemaCheck{a.st}}}
	var admission func(context.Context) error
	if a.cfg.MaxBacklog > 0 {
		admission = api.BacklogGate(a.st, int64(a.cfg.MaxBacklog), 250*time.Millisecond)
	}
	channels, err := channelSpecs(a.cfg)
	if err != nil {
		return nil, err
	}
	known, err := knownChannelSpecs(a.cfg)
	if err != nil {
		return nil, err
	}
	hosts, err := allowedHosts(a.cfg)
	if err != nil {
		return nil, err
	}
	if len(hosts) == 0 && allInterfaces(a.cfg.HTTPAddr) {
		a.log.Info("listening on all interfaces: the API and the console answer only Hosts that are IP addresses or localhost; list the names clients use in HERALD_ALLOWED_HOSTS",
			"addr", a.cfg.HTTPAddr)
	}
	status, err := a.newDeploymentReader()
	if err != nil {
		return nil, err
	}
	h, err := api.New(a.st, api.Config{
		Token:              a.cfg.APIToken,
		DebugFaults:        a.cfg.DebugFaults,
		Ready:              checks,
		Metrics:            a.metricsHandler(),
		Registerer:         a.reg,
		Logger:             a.log.With("component", "api"),
		Admission:          admission,
		DeadLetters:        deadletter.New(a.st, a.tr.deadLetters),
		Destinations:       a.st,
		Channels:           channels,
		DisabledChannels:   disabledChannels(a.cfg),
		CORSOrigins:        commaList(a.cfg.CORSOrigins),
		TracerProvider:     a.tp,
		AllowedHosts:       hosts,
		Status:             status,
		ScheduleHorizon:    a.cfg.ScheduleHorizon,
		Recipients:         a.st,
		Templates:          a.st,
		Preferences:        a.st,
		RequiredCategories: commaList(a.cfg.RequiredCategories),
		LinkSecret:         []byte(a.cfg.LinkSecret),
		PublicURL:          strings.TrimSuffix(a.cfg.PublicURL, "/"),
		KnownChannels:      known,
	})
	if err != nil {
		return nil, err
	}
	return a.withConsole(h.Handler(), hosts)
}

// checkAllowedHosts vets HERALD_ALLOWED_HOSTS as the settings table parses
// it.
func checkAllowedHosts(v string) error {
	_, err := hostcheck.New(commaList(v))
	return err
}

// allInterfaces reports whether addr listens on every interface.
func allInterfaces(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(h)
	return h == "" || err == nil && ip.IsUnspecified()
}

// allowedHosts are the names the API and the console answer to besides IP
// literals and localhost: HERALD_ALLOWED_HOSTS, and the host of
// HERALD_HTTP_ADDR when it is a name. A listener on all interfaces
// (":8080", "0.0.0.0:8080") names none: it cannot know the names clients
// reach it by, so it answers IP addresses and localhost until
// HERALD_ALLOWED_HOSTS lists them.
func allowedHosts(cfg Config) ([]string, error) {
	hosts := commaList(cfg.AllowedHosts)
	if err := checkAllowedHosts(cfg.AllowedHosts); err != nil {
		return nil, usageError{fmt.Errorf("HERALD_ALLOWED_HOSTS: %w", err)}
	}
	if h, _, err := net.SplitHostPort(cfg.HTTPAddr); err == nil && h != "" {
		if _, err := netip.ParseAddr(h); err != nil {
			hosts = append(hosts, h)
		}
	}
	return hosts, nil
}

// commaList splits a comma-separated setting (HERALD_CORS_ORIGINS,
// HERALD_ALLOWED_HOSTS), dropping empty items; api.New checks each.
func commaList(v string) []string {
	var out []string
	for o := range strings.SplitSeq(v, ",") {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, o)
		}
	}
	return out
}

// apiParts builds what the api process runs: the HTTP server, the backlog
// monitor with its alert, retention and the reconciler.
func (a *app) apiParts() ([]func(context.Context) error, error) {
	handler, err := a.apiHandler()
	if err != nil {
		return nil, err
	}
	var tg *monitor.TelegramConfig
	if a.cfg.TelegramToken != "" && a.cfg.TelegramChatID != "" {
		tg = &monitor.TelegramConfig{Token: a.cfg.TelegramToken, ChatID: a.cfg.TelegramChatID, API: a.cfg.TelegramAPI}
	}
	m, err := monitor.New(a.st, monitor.Config{
		Interval:   a.cfg.MonitorInterval,
		Threshold:  int64(a.cfg.AlertBacklog),
		For:        a.cfg.AlertFor,
		Logger:     a.log, // no extra attrs: the contract greps for msg="alert firing" alert=OutboxBacklog
		Registerer: a.reg,
		Telegram:   tg,
	})
	if err != nil {
		return nil, err
	}
	r, err := retention.New(a.st, retention.Config{Retention: a.cfg.Retention, Logger: a.log.With("component", "retention")})
	if err != nil {
		return nil, err
	}
	rc, err := reconcile.New(a.st, reconcile.Config{After: a.cfg.ReconcileAfter, Logger: a.log.With("component", "reconcile"), Registerer: a.reg})
	if err != nil {
		return nil, err
	}
	ln := a.hooks.listener
	if ln == nil {
		if ln, err = net.Listen("tcp", a.cfg.HTTPAddr); err != nil {
			return nil, fmt.Errorf("listen on %s: %w", a.cfg.HTTPAddr, err)
		}
		a.close = append(a.close, func() { _ = ln.Close() })
	}
	serve := func(ctx context.Context) error { return serveHTTP(ctx, ln, handler, a.log) }
	return []func(context.Context) error{serve, m.Run, r.Run, rc.Run}, nil
}

// newRelays builds the relays of a transport with a broker. Without
// HERALD_STATUS_WEBHOOK_URL one relay publishes every outbox row, status
// events included, to the broker. With it, that relay takes only
// notification.requested, and a second one (newStatusRelay) hands the
// status events to the broker and to the webhook: each row has exactly one
// relay, and a failing webhook delays only the status events.
func (a *app) newRelays() ([]*relay.Relay, error) {
	pub, closePub, err := a.tr.publisher("relay")
	if err != nil {
		return nil, err
	}
	a.close = append(a.close, closePub)
	if a.hooks.wrapPublisher != nil {
		pub = a.hooks.wrapPublisher(pub)
	}
	var types []string
	if a.cfg.StatusWebhookURL != "" {
		types = []string{notify.EventRequested}
	}
	rl, err := relay.New(a.st, pub, a.st, relay.Config{
		Batch:      a.cfg.RelayBatch,
		Interval:   a.cfg.RelayInterval,
		Types:      types,
		Logger:     a.log.With("component", "relay"),
		Registerer: a.reg,

		TracerProvider: a.tp,
	})
	if err != nil {
		return nil, err
	}
	a.checks = append(a.checks, api.Check{Name: "relay", Pinger: rl})
	if types == nil {
		return []*relay.Relay{rl}, nil
	}
	statusPub, closeStatusPub, err := a.tr.publisher("status-relay")
	if err != nil {
		return nil, err
	}
	a.close = append(a.close, closeStatusPub)
	srl, err := a.newStatusRelay(statusPub)
	if err != nil {
		return nil, err
	}
	return []*relay.Relay{rl, srl}, nil
}

// newStatusRelay builds the relay of the status events: to broker (nil on
// the outbox table) and to HERALD_STATUS_WEBHOOK_URL when set, an event
// confirmed once every sink confirmed it; with neither, its rows are
// confirmed at once (marked processed, so the backlog counts only what
// waits for a delivery, and pruned by retention).
func (a *app) newStatusRelay(broker relay.Publisher) (*relay.Relay, error) {
	var sinks []relay.Publisher
	if broker != nil {
		sinks = append(sinks, broker)
	}
	if a.cfg.StatusWebhookURL != "" {
		if a.cfg.WebhookSecret == "" {
			return nil, usageError{errors.New("HERALD_STATUS_WEBHOOK_URL needs HERALD_WEBHOOK_SECRET, which signs the status events")}
		}
		wp, err := webhook.NewStatusPublisher(webhook.StatusConfig{
			URL: a.cfg.StatusWebhookURL, Secret: a.cfg.WebhookSecret, Timeout: a.cfg.WebhookTimeout,
		})
		if err != nil {
			return nil, usageError{fmt.Errorf("HERALD_STATUS_WEBHOOK_URL: %w", err)}
		}
		a.close = append(a.close, func() { _ = wp.Close() })
		// Each event the webhook refuses is retried on the retry
		// schedule and then dead-lettered, on its own: it never holds
		// up the others, nor the broker's copy.
		rp, err := relay.NewRetrier(wp, relay.RetryConfig{
			MaxRetries: a.cfg.MaxRetries, Delays: a.cfg.RetryDelays,
			Logger: a.log.With("component", "status-relay"), Registerer: a.reg,
		})
		if err != nil {
			return nil, err
		}
		sinks = append(sinks, rp)
	}
	var pub relay.Publisher = relay.ConfirmAll{}
	if len(sinks) > 0 {
		f, err := relay.NewFanOut(sinks...)
		if err != nil {
			return nil, err
		}
		pub = f
	}
	rl, err := relay.New(a.st, pub, a.st, relay.Config{
		Batch:      a.cfg.RelayBatch,
		Interval:   a.cfg.RelayInterval,
		Types:      notify.StatusEventTypes,
		Name:       "status",
		Logger:     a.log.With("component", "status-relay"),
		Registerer: a.reg,
	})
	if err != nil {
		return nil, err
	}
	a.checks = append(a.checks, api.Check{Name: "status-relay", Pinger: rl})
	return rl, nil
}

// drainStatus returns a part that relays (with rl, whose sinks confirm
// at once) the status events left unprocessed by an earlier run that wrote
// them, until a batch comes back short, and then returns: the process
// writes none itself. Left alone they would count in the backlog for ever,
// and retention prunes only processed rows. A failing store is retried
// every interval until ctx ends.
func drainStatus(rl *relay.Relay, batch int, interval time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		for {
			n, err := rl.RunOnce(ctx)
			switch {
			case ctx.Err() != nil:
				return nil
			case err == nil && n < batch:
				return nil
			case err == nil:
				continue
			}
			t := time.NewTimer(interval)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
	}
}

// newWorker builds the worker on the transport's source and one sender
// per registered channel.
func (a *app) newWorker() (*worker.Worker, error) {
	src, err := a.tr.source(a.st, "worker")
	if err != nil {
		return nil, err
	}
	channels := make(map[string]worker.Channel, len(channelKinds))
	for _, k := range enabledChannels(a.cfg) {
		snd, closeSender, err := k.open(a.cfg)
		if err != nil {
			return nil, err
		}
		a.close = append(a.close, closeSender)
		if a.hooks.wrapSender != nil {
			snd = a.hooks.wrapSender(snd)
		}
		// A channel's send timeout is its sender's own; the worker bounds
		// every send with it too, and the claim lease follows the longest
		// (the table transport's row lease is longer still). The rate is
		// the worker's: a delivery whose turn has not come is parked until
		// it before its claim, so it never costs an attempt.
		ch := k.limits(a.cfg)
		ch.Sender = snd
		channels[k.name] = ch
	}
	crash, err := crashHook(a.cfg.DebugCrash, a.log)
	if err != nil {
		return nil, err
	}
	claimLease, _ := deliveryLeases(a.cfg)
	w, err := worker.New(src, a.st, channels, worker.Config{
		RetryDelays:          a.cfg.RetryDelays,
		MaxRetries:           a.cfg.MaxRetries,
		Sends:                a.cfg.Prefetch,
		Lease:                claimLease,
		OutageSpendsAttempts: a.cfg.SMTPOutage == "attempt",
		Destinations:         destinationBook(a.st),
		DisableAfter:         a.cfg.DestinationDisableAfter,
		Logger:               a.log.With("component", "worker"),
		Registerer:           a.reg,
		Crash:                crash,
		TracerProvider:       a.tp,
	})
	if err != nil {
		return nil, usageError{fmt.Errorf("worker: %w (HERALD_SMTP_RATE=%d, HERALD_PREFETCH=%d, HERALD_EMAIL_CONCURRENCY=%d)", err, a.cfg.SMTPRate, a.cfg.Prefetch, a.cfg.EmailConcurrency)}
	}
	for _, name := range w.Channels() {
		a.checks = append(a.checks, api.Check{Name: "sender:" + name, Pinger: senderCheck{w, name}, ShowReason: true})
	}
	return w, nil
}

// destinationBook is the store's record of destinations that are not up,
// nil for a store that keeps none.
func destinationBook(st store) worker.DestinationBook {
	if b, ok := st.(worker.DestinationBook); ok {
		return b
	}
	return nil
}

// senderCheck is the worker's readiness as to its sender: not ready while
// sends are paused (the provider down or throttling), with the reason.
type senderCheck struct {
	w       *worker.Worker
	channel string
}

func (c senderCheck) Ping(context.Context) error {
	if up, reason := c.w.ChannelStatus(c.channel); !up {
		return errors.New(reason)
	}
	return nil
}

// metricsParts is the own listener of relay and worker, when
// HERALD_METRICS_ADDR is set: /metrics, /healthz, and /readyz (the store,
// its schema and the broker).
func (a *app) metricsParts() ([]func(context.Context) error, error) {
	if a.cfg.MetricsAddr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", a.cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", a.cfg.MetricsAddr, err)
	}
	a.close = append(a.close, func() { _ = ln.Close() })
	return []func(context.Context) error{func(ctx context.Context) error {
		return serveHTTP(ctx, ln, a.opsHandler(), a.log)
	}}, nil
}

// opsHandler serves the relay's and the worker's /metrics, /healthz and
// /readyz.
func (a *app) opsHandler() http.Handler {
	checks := []api.Check{{Name: "store", Pinger: a.st}, {Name: "schema", Pinger: schemaCheck{a.st}}}
	if a.tr.probe != nil {
		checks = append(checks, api.Check{Name: "broker", Pinger: a.tr.probe})
	}
	checks = append(checks, a.checks...)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", a.metricsHandler())
	mux.Handle("GET /readyz", api.Ready(checks, a.log))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	return mux
}

// serveHTTP serves h on ln until ctx ends, then shuts down gracefully.
func serveHTTP(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	log.Info("listening", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shut down %s: %w", ln.Addr(), err)
	}
	return nil
}

// crashHook parses HERALD_DEBUG_CRASH (POINT[:N]) into a hook that kills the
// process with SIGKILL the N-th time the worker passes POINT: a crash that
// no deferred function or signal handler can soften.
func crashHook(spec string, log *slog.Logger) (func(string), error) {
	if spec == "" {
		return nil, nil
	}
	point, nth, _ := strings.Cut(spec, ":")
	if point != "after-send" && point != "after-commit" {
		return nil, usageError{fmt.Errorf("HERALD_DEBUG_CRASH: unknown point %q (want after-send or after-commit)", point)}
	}
	n := int64(1)
	if nth != "" {
		v, err := strconv.ParseInt(nth, 10, 64)
		if err != nil || v < 1 {
			return nil, usageError{fmt.Errorf("HERALD_DEBUG_CRASH: want POINT[:N] with N >= 1, got %q", spec)}
		}
		n = v
	}
	var passes atomic.Int64
	return func(p string) {
		if p != point || passes.Add(1) != n {
			return
		}
		log.Error("debug crash: killing the process", "point", p, "pass", n)
		_ = syscall.Kill(syscall.Getpid(), syscall.SIGKILL)
		select {} // never continue past the crash point
	}, nil
}

// newLogger is the process's logger as HERALD_LOG_FORMAT and
// HERALD_LOG_LEVEL ask (parseConfig has checked both).
func newLogger(cfg Config, e env) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel)) // "" (a one-shot command) stays info
	// Every string and error logged has the configuration's secrets
	// masked, whatever part of herald or of a library wrote it.
	sc := newScrubber(configSecrets(cfg))
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		switch v := a.Value.Any().(type) {
		case string:
			if t := sc.text(v); t != v {
				a.Value = slog.StringValue(t)
			}
		case error:
			if t := sc.text(v.Error()); t != v.Error() {
				a.Value = slog.StringValue(t)
			}
		}
		return a
	}}
	if cfg.LogFormat == "json" {
		return slog.New(tracing.NewLogHandler(slog.NewJSONHandler(e.stderr, opts)))
	}
	return slog.New(tracing.NewLogHandler(slog.NewTextHandler(e.stderr, opts)))
}

// configSecrets lists the values of cfg's settings for a scrubber.
func configSecrets(cfg Config) []secretSource {
	var out []secretSource
	for _, s := range settings {
		if _, ok := s.field(&cfg).(*string); ok {
			out = append(out, secretSource{value: settingText(&cfg, s), secret: s.secret})
		}
	}
	return out
}
