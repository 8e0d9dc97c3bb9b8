package rabbitmq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/internal/transport/consume"
)

// Config configures a Publisher or a Consumer. Every field whose zero is
// meaningless (no broker can hold it, or it would spin) gets a default; the
// others are honoured as given.
type Config struct {
	// URL is the broker URL, amqp://user:pass@host:port/vhost, or a
	// comma-separated list of them, one per node of a cluster. A connection
	// goes to the first node that answers; after a connection is lost the
	// next one starts with the node after the one lost, so that a node that
	// went down is tried last. Required.
	URL string
	// Settings are the settings every broker shares, with the same
	// defaults (see consume.Settings). Here Prefix is prepended to every
	// exchange and queue name, not to the routing key. Each distinct delay
	// of RetryDelays has a retry queue of its own whose x-message-ttl it is
	// (see Topology.RetryQueueFor): changing a delay for an existing queue
	// makes the declaration fail, and the queue has to be deleted first.
	// Empty RetryDelays means the one delay RetryDelay.
	consume.Settings
	// RetryDelay is the schedule when RetryDelays is empty: every retry
	// waits this long in the queue "notifications.retry". The broker needs
	// a TTL of at least 1ms, so zero means the default. Default 30s.
	RetryDelay time.Duration
	// QueueType is QueueQuorum or QueueClassic, the type of every queue
	// declared. A queue that exists with the other type makes the
	// declaration fail with ErrTopologyMismatch. Empty means the default.
	// Default QueueQuorum.
	QueueType string
	// ConfirmTimeout bounds the wait for the broker's publisher confirms.
	// Zero would give up on every publish, so it means the default.
	// Default 15s.
	ConfirmTimeout time.Duration
	// ConnectionName is shown by rabbitmqctl list_connections and the
	// management UI. Default "herald publisher" / "herald consumer".
	ConnectionName string
}

func (c Config) withDefaults() Config {
	c.RetryDelay = cmp.Or(c.RetryDelay, consume.DefaultRetryDelay)
	if len(c.RetryDelays) == 0 {
		c.RetryDelays = []time.Duration{c.RetryDelay}
	} else {
		c.RetryDelay = c.RetryDelays[0]
	}
	c.Settings = c.Settings.WithDefaults()
	c.QueueType = cmp.Or(c.QueueType, QueueQuorum)
	c.ConfirmTimeout = cmp.Or(c.ConfirmTimeout, 15*time.Second)
	return c
}

// maxTTL is the largest x-message-ttl RabbitMQ accepts, in milliseconds.
const maxTTL = 1<<32 - 1

func (c Config) validate() error {
	if err := c.Settings.Validate("rabbitmq"); err != nil {
		return err
	}
	for _, d := range c.RetryDelays {
		if d < time.Millisecond || d.Milliseconds() > maxTTL {
			return fmt.Errorf("rabbitmq: retry delay must be between 1ms and %s, got %s", time.Duration(maxTTL)*time.Millisecond, d)
		}
	}
	switch {
	case c.URL == "":
		return errors.New("rabbitmq: broker URL is required")
	case c.Prefetch > 65535:
		return fmt.Errorf("rabbitmq: prefetch must be between 1 and 65535, got %d", c.Prefetch)
	case c.QueueType != QueueQuorum && c.QueueType != QueueClassic:
		return fmt.Errorf("rabbitmq: queue type must be %q or %q, got %q", QueueQuorum, QueueClassic, c.QueueType)
	case c.ConfirmTimeout <= 0:
		return fmt.Errorf("rabbitmq: confirm timeout must be positive, got %s", c.ConfirmTimeout)
	}
	for i, u := range c.urls() {
		// The parse error never quotes the URL, which may hold a password.
		if _, err := amqp.ParseURI(u); err != nil {
			if len(c.urls()) > 1 {
				return fmt.Errorf("rabbitmq: invalid broker URL #%d of the list: %w", i+1, err)
			}
			return fmt.Errorf("rabbitmq: invalid broker URL: %w", err)
		}
	}
	return nil
}

// urls splits URL into the nodes' URLs.
func (c Config) urls() []string {
	var out []string
	for u := range strings.SplitSeq(c.URL, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// Topology returns the names and arguments the configuration declares,
// defaults applied.
func (c Config) Topology() Topology {
	c = c.withDefaults()
	t := NewTopology(c.Prefix, c.RetryDelay)
	t.RetryDelays = c.RetryDelays
	t.QueueType = c.QueueType
	return t
}

// handshakeTimeout bounds the TCP connect and the AMQP handshake, which
// the client library does not tie to a context.
const handshakeTimeout = 30 * time.Second

// dial opens a connection named after the configuration to the first
// node of the URL list that answers. ctx bounds the attempt.
func (c Config) dial(ctx context.Context, role string) (*amqp.Connection, error) {
	conn, _, err := c.dialFrom(ctx, role, 0)
	return conn, err
}

// openConn is how an operation of its own begins (a count, a removal, a
// status read, a declaration at start): it fills cfg's defaults and checks
// them, then dials (role names the connection). The client library takes
// no context after the handshake, so the connection is closed when ctx
// ends, failing any call in progress; the returned stop closes it in any
// case, without waiting for ever on a broker that blocked it. It returns
// cfg as filled.
func openConn(ctx context.Context, cfg Config, role string) (Config, *amqp.Connection, func(), error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return cfg, nil, nil, err
	}
	conn, err := cfg.dial(ctx, role)
	if err != nil {
		return cfg, nil, nil, err
	}
	unwatch := context.AfterFunc(ctx, func() { _ = conn.Close() })
	return cfg, conn, func() {
		unwatch()
		_ = closeConn(conn) // already closed after a failure: nothing to report
	}, nil
}

// dialFrom tries the nodes of the URL list in turn, starting with the one at
// index start, and returns the connection to the first that answers and its
// index. ctx bounds the whole attempt.
func (c Config) dialFrom(ctx context.Context, role string, start int) (*amqp.Connection, int, error) {
	urls := c.urls()
	if len(urls) == 0 {
		return nil, 0, errors.New("dial broker: no broker URL")
	}
	var errs []error
	for k := range urls {
		i := (start + k) % len(urls)
		conn, err := c.dialURL(ctx, role, urls[i])
		if err == nil {
			return conn, i, nil
		}
		if len(urls) == 1 {
			return nil, 0, err
		}
		errs = append(errs, fmt.Errorf("node %s: %w", hostOf(urls[i]), err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, 0, fmt.Errorf("no broker node answered: %w", errors.Join(errs...))
}

// hostOf is the host:port of an AMQP URL, never its credentials.
func hostOf(u string) string {
	uri, err := amqp.ParseURI(u)
	if err != nil {
		return "(invalid URL)"
	}
	return net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port))
}

// rotor remembers which node of the URL list a Publisher or Consumer was
// last connected to, so that a reconnection starts with the next node: the
// one that was lost is likely down.
type rotor struct {
	mu   sync.Mutex
	next int
}

// dial connects to the first node that answers, starting after the node of
// the previous connection.
func (r *rotor) dial(ctx context.Context, c Config, role string) (*amqp.Connection, error) {
	r.mu.Lock()
	start := r.next
	r.mu.Unlock()
	conn, i, err := c.dialFrom(ctx, role, start)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.next = i + 1
	r.mu.Unlock()
	return conn, nil
}

// dialURL opens a connection named after the configuration to one node.
// ctx bounds the TCP connect and the handshake.
func (c Config) dialURL(ctx context.Context, role, url string) (*amqp.Connection, error) {
	name := c.ConnectionName
	if name == "" {
		name = "herald " + role
	}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(name)

	var (
		mu  sync.Mutex
		raw net.Conn
	)
	dialer := func(network, addr string) (net.Conn, error) {
		dctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
		defer cancel()
		var d net.Dialer
		conn, err := d.DialContext(dctx, network, addr)
		if err != nil {
			return nil, err
		}
		// The library clears this deadline once the handshake is done.
		if err := conn.SetDeadline(time.Now().Add(handshakeTimeout)); err != nil {
			conn.Close()
			return nil, err
		}
		mu.Lock()
		raw = conn
		mu.Unlock()
		return conn, nil
	}
	// Abort a handshake in progress when ctx ends.
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if raw != nil {
			_ = raw.SetDeadline(time.Now())
		}
	})
	conn, err := amqp.DialConfig(url, amqp.Config{Properties: props, Dial: dialer})
	if !stop() && err == nil {
		// ctx ended during or right after the handshake: the deadline may
		// have been set on a live connection, so do not use it.
		conn.Close()
		return nil, fmt.Errorf("dial broker: %w", ctx.Err())
	}
	if err != nil {
		return nil, fmt.Errorf("dial broker: %w", err)
	}
	return conn, nil
}
