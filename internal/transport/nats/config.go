package nats

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/heraldhq/herald/internal/transport/consume"
)

// DefaultMaxAckPending is Config.MaxAckPending's default: room for, say,
// 75 workers holding 128 deliveries each (herald's window: 4 x
// HERALD_PREFETCH's default of 32). It only guards the server
// against a runaway (each pending delivery is a little of its memory, and
// a redelivery timer); the workers' prefetch is what bounds the load.
const DefaultMaxAckPending = 10000

// DefaultStatusMaxAge is Config.StatusMaxAge's default.
const DefaultStatusMaxAge = 7 * 24 * time.Hour

// Config configures a Publisher or a Consumer. Every field whose zero is
// meaningless (the server cannot hold it, or it would spin) gets a default;
// the others are honoured as given.
type Config struct {
	// URL is the server URL, nats://[user:pass@]host:port; several
	// comma-separated URLs are the seeds of a cluster. Required.
	URL string
	// Settings are the settings every broker shares, with the same
	// defaults (see consume.Settings). Here Prefix is prepended to every
	// subject, and (with the characters a name cannot hold replaced by "_")
	// to the stream and consumer names; a zero retry delay is legal (the
	// retry is due at once). The rest of a stop after ShutdownGrace is short
	// (a pull in progress ends within 1s, the hand-backs are flushed for at
	// most 2s), so Consume returns within about ShutdownGrace + 3s.
	consume.Settings
	// MaxAckPending is the worker consumer's MaxAckPending: the most
	// deliveries handed out and not yet settled across every worker that
	// shares the durable consumer. It is a shared safety ceiling, not the
	// throughput setting: each worker bounds its own deliveries in flight by
	// its Prefetch (it pulls no more than its idle handlers), so N workers
	// hold up to N x Prefetch. Zero means the default,
	// DefaultMaxAckPending. Every worker declares the consumer with this
	// value (an existing consumer is updated to it), so it must not depend
	// on a per-worker setting such as Prefetch, or workers configured
	// differently would keep rewriting it.
	MaxAckPending int
	// AckWait is how long the server waits for the settlement of a delivery
	// before it hands it out again. It must be longer than a send, or a slow
	// send is delivered twice (the worker's deduplication absorbs that);
	// it is also how late a delivery whose settlement was lost in an outage
	// comes back. Zero would redeliver at once, so it means the default.
	// Default 5m.
	AckWait time.Duration
	// DuplicateWindow is the stream's duplicate window: a message whose
	// Nats-Msg-Id the stream stored this recently is acknowledged and not
	// stored again. Zero means the default. Default 2m.
	DuplicateWindow time.Duration
	// StatusMaxAge is how long the status stream keeps a status event,
	// read or not: other services' consumers must read it within that
	// time, and when nobody reads, the stream holds no more than this much
	// of them. It must not be shorter than DuplicateWindow (the server
	// refuses such a stream). Zero means the default. Default 168h (7 days,
	// Kafka's default retention).
	StatusMaxAge time.Duration
	// Replicas is the number of servers the streams are stored on (1 to 5;
	// 3 on a cluster keeps it through the loss of one server). Zero means
	// the default. Default 1.
	Replicas int
	// ConfirmTimeout bounds the wait for the stream's acknowledgement of a
	// publish. Zero would give up on every publish, so it means the
	// default. Default 15s.
	ConfirmTimeout time.Duration
	// ConnectionName is shown by the server's monitoring. Default
	// "herald publisher" / "herald consumer".
	ConnectionName string
	// CheckInterval is how often a Consumer checks that its consumers still
	// exist (a stream deleted by hand deletes them), so that it declares
	// them again instead of waiting for messages that cannot come. Zero
	// means the default. Default 10s.
	CheckInterval time.Duration
}

func (c Config) withDefaults() Config {
	c.Settings = c.Settings.WithDefaults()
	c.MaxAckPending = cmp.Or(c.MaxAckPending, DefaultMaxAckPending)
	c.AckWait = cmp.Or(c.AckWait, 5*time.Minute)
	c.DuplicateWindow = cmp.Or(c.DuplicateWindow, 2*time.Minute)
	c.StatusMaxAge = cmp.Or(c.StatusMaxAge, DefaultStatusMaxAge)
	c.Replicas = cmp.Or(c.Replicas, 1)
	c.ConfirmTimeout = cmp.Or(c.ConfirmTimeout, 15*time.Second)
	c.CheckInterval = cmp.Or(c.CheckInterval, 10*time.Second)
	return c
}

func (c Config) validate() error {
	if err := c.Settings.Validate("nats"); err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(c.URL) == "":
		return errors.New("nats: server URL is required")
	case c.MaxAckPending < 1:
		return fmt.Errorf("nats: max ack pending must be at least 1, got %d", c.MaxAckPending)
	case c.AckWait <= 0:
		return fmt.Errorf("nats: ack wait must be positive, got %s", c.AckWait)
	case c.DuplicateWindow <= 0:
		return fmt.Errorf("nats: duplicate window must be positive, got %s", c.DuplicateWindow)
	case c.StatusMaxAge < c.DuplicateWindow:
		return fmt.Errorf("nats: status max age must not be shorter than the duplicate window (%s), got %s", c.DuplicateWindow, c.StatusMaxAge)
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("nats: replicas must be between 1 and 5, got %d", c.Replicas)
	case c.ConfirmTimeout <= 0:
		return fmt.Errorf("nats: confirm timeout must be positive, got %s", c.ConfirmTimeout)
	case c.CheckInterval <= 0:
		return fmt.Errorf("nats: check interval must be positive, got %s", c.CheckInterval)
	}
	for _, u := range strings.Split(c.URL, ",") {
		u = strings.TrimSpace(u)
		if u != "" && !strings.HasPrefix(u, "nats://") && !strings.HasPrefix(u, "tls://") {
			// Never quote the URL: it may hold a password.
			return errors.New("nats: every server URL must start with nats:// or tls://")
		}
	}
	return nil
}

// Topology returns the names the configuration uses.
func (c Config) Topology() Topology { return NewTopology(c.Prefix) }

// retryDelay is the wait before retry n (n >= 1).
func (c Config) retryDelay(n int) time.Duration {
	return c.RetryDelays[min(max(n, 1), len(c.RetryDelays))-1]
}

// connectTimeout bounds the TCP connect and handshake with one server.
const connectTimeout = 10 * time.Second

// ctxDialer makes the client's connection attempts end with a context:
// life for every attempt, and first as well while the first connection is
// being made.
type ctxDialer struct {
	life  context.Context
	first atomic.Pointer[context.Context]
}

func (d *ctxDialer) Dial(network, address string) (net.Conn, error) {
	dctx, cancel := context.WithTimeout(d.life, connectTimeout)
	defer cancel()
	if first := d.first.Load(); first != nil {
		stop := context.AfterFunc(*first, cancel)
		defer stop()
	}
	var nd net.Dialer
	return nd.DialContext(dctx, network, address)
}

// connect opens a connection named after the configuration. ctx bounds
// the first connection; life bounds every reconnection the client makes on
// its own afterwards (it keeps trying for as long as life lasts, backing
// off from ReconnectMin to ReconnectMax). closed, when not nil, is called
// once the client closed the connection for good on its own (never after
// a Close of ours).
func (c Config) connect(ctx, life context.Context, role string, closed func()) (*natsgo.Conn, error) {
	name := c.ConnectionName
	if name == "" {
		name = "herald " + role
	}
	log := c.Logger
	dialer := &ctxDialer{life: life}
	dialer.first.Store(&ctx)
	opts := []natsgo.Option{
		natsgo.Name(name),
		natsgo.Timeout(connectTimeout),
		natsgo.SetCustomDialer(dialer),
		natsgo.MaxReconnects(-1),
		natsgo.CustomReconnectDelay(func(attempts int) time.Duration {
			d := c.ReconnectMin
			for i := 1; i < attempts && d < c.ReconnectMax; i++ {
				d *= 2
			}
			return min(d, c.ReconnectMax)
		}),
		natsgo.NoCallbacksAfterClientClose(),
		natsgo.DisconnectErrHandler(func(_ *natsgo.Conn, err error) {
			if err != nil {
				log.Warn("nats connection lost; reconnecting", "role", role, "err", err)
			}
		}),
		natsgo.ReconnectHandler(func(nc *natsgo.Conn) {
			log.Info("nats connection restored", "role", role, "server", nc.ConnectedAddr())
		}),
		natsgo.ErrorHandler(func(_ *natsgo.Conn, _ *natsgo.Subscription, err error) {
			log.Warn("nats asynchronous error", "role", role, "err", err)
		}),
	}
	if closed != nil {
		opts = append(opts, natsgo.ClosedHandler(func(*natsgo.Conn) { closed() }))
	}
	nc, err := natsgo.Connect(c.URL, opts...)
	dialer.first.Store(nil)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("connect to nats: %w", ctx.Err())
		}
		if errors.Is(err, natsgo.ErrAuthorization) || errors.Is(err, natsgo.ErrAuthExpired) {
			return nil, fmt.Errorf("connect to nats: the server rejected the credentials of the broker URL: %w", err)
		}
		return nil, fmt.Errorf("connect to nats: %w", err)
	}
	return nc, nil
}
