package nats

import (
	"context"
	"fmt"
)

// Pinger checks that the server is reachable and has JetStream, for
// readiness probes. It holds no connection: each Ping opens one (which also
// proves the credentials) and closes it, so a probe never reports a
// connection that died since the last one as healthy.
type Pinger struct {
	// URL is the server URL. Required.
	URL string
}

// Ping connects, asks for the account's JetStream information and
// disconnects. ctx bounds the attempt.
func (p Pinger) Ping(ctx context.Context) error {
	_, nc, js, err := openJetStream(ctx, Config{URL: p.URL, ConnectionName: "herald readiness"}, "readiness")
	if err != nil {
		return fmt.Errorf("ping broker: %w", err)
	}
	defer nc.Close()
	if _, err := js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("ping broker: jetstream: %w", err)
	}
	return nil
}
