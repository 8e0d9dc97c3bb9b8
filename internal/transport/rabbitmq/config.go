package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Config configures a Publisher or a Consumer. Every field whose zero is
// meaningless (no broker can hold it, or it would spin) gets a default; the
// others are honoured as given.
type Config struct {
	// URL is the broker URL, amqp://user:pass@host:port/vhost. Required.
	URL string
	// Prefix is prepended to every exchange and queue name so that tests
	// and benchmarks get a topology of their own. The routing key is not
	// prefixed. Default "".
	Prefix string
	// RetryDelay is how long a retried message waits in the retry queue
	// (its x-message-ttl). Changing it for an existing queue makes the
	// declaration fail: the queue has to be deleted first. The broker
	// needs a TTL of at least 1ms, so zero means the default. Default 30s
	// (every process of an installation must use the same value).
	RetryDelay time.Duration
	// Prefetch is the number of unacknowledged deliveries a Consumer holds,
	// and the number of handler goroutines it runs. Zero would take
	// nothing, so it means the default. Default 10.
	Prefetch int
	// ConfirmTimeout bounds the wait for the broker's publisher confirms.
	// Zero would give up on every publish, so it means the default.
	// Default 15s.
	ConfirmTimeout time.Duration
	// ConnectionName is shown by rabbitmqctl list_connections and the
	// management UI. Default "herald publisher" / "herald consumer".
	ConnectionName string
	// Logger receives the Consumer's connection failures (one per attempt,
	// at WARN) and settlement failures it cannot return to anybody.
	// Default: discard.
	Logger *slog.Logger
	// ReconnectMin is the Consumer's first wait after a failed connection;
	// it doubles on each further failure. Zero would reconnect in a busy
	// loop, so it means the default. Default 100ms.
	ReconnectMin time.Duration
	// ReconnectMax caps the wait between reconnection attempts. Zero means
	// the default. Default 5s.
	ReconnectMax time.Duration
	// ShutdownGrace bounds how long handlers in flight when Consume's
	// context ends may still run: their context is cancelled only this long
	// after the shutdown began. Zero would cancel them mid-settlement, so
	// it means the default. Default 30s.
	ShutdownGrace time.Duration
}

func (c Config) withDefaults() Config {
	if c.RetryDelay == 0 {
		c.RetryDelay = 30 * time.Second
	}
	if c.Prefetch == 0 {
		c.Prefetch = 10
	}
	if c.ConfirmTimeout == 0 {
		c.ConfirmTimeout = 15 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.ReconnectMin == 0 {
		c.ReconnectMin = 100 * time.Millisecond
	}
	if c.ReconnectMax == 0 {
		c.ReconnectMax = 5 * time.Second
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = 30 * time.Second
	}
	return c
}

// maxTTL is the largest x-message-ttl RabbitMQ accepts, in milliseconds.
const maxTTL = 1<<32 - 1

func (c Config) validate() error {
	switch {
	case c.URL == "":
		return errors.New("rabbitmq: broker URL is required")
	case c.RetryDelay < time.Millisecond || c.RetryDelay.Milliseconds() > maxTTL:
		return fmt.Errorf("rabbitmq: retry delay must be between 1ms and %s, got %s", time.Duration(maxTTL)*time.Millisecond, c.RetryDelay)
	case c.Prefetch < 1 || c.Prefetch > 65535:
		return fmt.Errorf("rabbitmq: prefetch must be between 1 and 65535, got %d", c.Prefetch)
	case c.ConfirmTimeout <= 0:
		return fmt.Errorf("rabbitmq: confirm timeout must be positive, got %s", c.ConfirmTimeout)
	case c.ReconnectMin <= 0 || c.ReconnectMax < c.ReconnectMin:
		return fmt.Errorf("rabbitmq: reconnect backoff must satisfy 0 < min <= max, got %s / %s", c.ReconnectMin, c.ReconnectMax)
	case c.ShutdownGrace <= 0:
		return fmt.Errorf("rabbitmq: shutdown grace must be positive, got %s", c.ShutdownGrace)
	}
	// The parse error never quotes the URL, which may hold a password.
	if _, err := amqp.ParseURI(c.URL); err != nil {
		return fmt.Errorf("rabbitmq: invalid broker URL: %w", err)
	}
	return nil
}

// Topology returns the names and arguments the configuration declares,
// defaults applied.
func (c Config) Topology() Topology {
	return NewTopology(c.Prefix, c.withDefaults().RetryDelay)
}

// handshakeTimeout bounds the TCP connect and the AMQP handshake, which
// the client library does not tie to a context.
const handshakeTimeout = 30 * time.Second

// dial opens a connection named after the configuration. ctx bounds the
// TCP connect and the handshake.
func (c Config) dial(ctx context.Context, role string) (*amqp.Connection, error) {
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
	conn, err := amqp.DialConfig(c.URL, amqp.Config{Properties: props, Dial: dialer})
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
