package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Pinger checks that the cluster is reachable, for readiness probes. Each
// Ping opens a client, asks a broker for its API versions (which also
// authenticates, so wrong credentials fail the probe with the broker's
// answer) and closes it.
type Pinger struct {
	// Config reaches the cluster (Brokers, credentials, TLS). Required.
	Config Config
}

// Ping connects to a broker and disconnects. ctx bounds the attempt.
func (p Pinger) Ping(ctx context.Context) error {
	cfg := p.Config.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	cl, err := kgo.NewClient(cfg.ConnOpts()...)
	if err != nil {
		return fmt.Errorf("ping kafka: %w", err)
	}
	defer cl.Close()
	if err := cl.Ping(ctx); err != nil {
		return fmt.Errorf("ping kafka: %w", authHint(cfg, err))
	}
	return nil
}

// authHint names the credentials in an error that may come from their
// refusal: brokers refuse with SASL_AUTHENTICATION_FAILED, or (some) by
// closing the connection mid-handshake.
func authHint(cfg Config, err error) error {
	if cfg.User != "" && (errors.Is(err, io.EOF) || errors.Is(err, kerr.SaslAuthenticationFailed)) {
		return fmt.Errorf("as %q with SASL %s: %w (check the user, password and mechanism)", cfg.User, cfg.Mechanism, err)
	}
	return err
}
