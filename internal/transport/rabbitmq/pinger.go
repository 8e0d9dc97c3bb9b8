package rabbitmq

import (
	"context"
	"fmt"
)

// Pinger checks that the broker is reachable, for readiness probes. It
// holds no connection: each Ping opens one (TCP connect and AMQP handshake,
// which also proves the credentials) and closes it, so a probe never
// reports a connection that died since the last one as healthy.
type Pinger struct {
	// URL is the broker URL. Required.
	URL string
}

// Ping connects to the broker and disconnects. ctx bounds the attempt.
func (p Pinger) Ping(ctx context.Context) error {
	cfg := Config{URL: p.URL, ConnectionName: "herald readiness"}.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	conn, err := cfg.dial(ctx, "readiness")
	if err != nil {
		return fmt.Errorf("ping broker: %w", err)
	}
	// A failed close of a connection that worked changes nothing.
	_ = conn.Close()
	return nil
}
