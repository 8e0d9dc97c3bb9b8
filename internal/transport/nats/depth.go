package nats

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/heraldhq/herald/internal/notify"
)

// Depth reports the depth of herald's stream, for the console and GET
// /status: the workers' consumer (messages not yet delivered, and
// delivered but not acknowledged), the retry consumer (copies waiting for
// their delay) and the dead letters. It holds no connection: each call
// opens one, as Pinger does.
type Depth struct {
	// Config names the server and the topology (its URL and prefix).
	// Required.
	Config Config
}

// QueueDepths asks JetStream for the consumers' and the stream's
// information; it creates nothing. A pull consumer's attached workers are
// not counted by the server (only their waiting pull requests are):
// Consumers is nil, but 0 while the durable consumer was never made (no
// worker ever ran). Before the stream exists it reports nothing.
func (d Depth) QueueDepths(ctx context.Context) ([]notify.QueueDepth, error) {
	cfg, nc, js, err := openJetStream(ctx, d.Config, "status")
	if err != nil {
		return nil, fmt.Errorf("queue depths: %w", err)
	}
	defer nc.Close()
	t := cfg.Topology()
	s, err := js.Stream(ctx, t.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("queue depths: %w", err)
	}
	// The stream holds what is not acknowledged yet, per subject (a
	// work-queue stream deletes a message once acknowledged); each
	// consumer splits its subject's count into not yet delivered and in
	// flight. Before any worker ran, the workers' consumer does not exist:
	// nothing is in flight, and nobody consumes.
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		return nil, fmt.Errorf("queue depths: %w", err)
	}
	held := info.State.Subjects
	var out []notify.QueueDepth
	for _, c := range []struct{ name, subject, role string }{
		{t.WorkerConsumer, t.Requested, notify.QueueSend},
		{t.RetryConsumer, t.Retry, notify.QueueRetry},
	} {
		q := notify.QueueDepth{Name: c.subject, Role: c.role, Ready: int64(held[c.subject])}
		ci, err := s.Consumer(ctx, c.name)
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound):
			none, zero := 0, int64(0)
			q.Consumers, q.InFlight = &none, &zero
		case err != nil:
			return nil, fmt.Errorf("queue depths: consumer %s: %w", c.name, err)
		default:
			ci := ci.CachedInfo()
			inFlight := int64(ci.NumAckPending)
			q.Ready, q.InFlight = int64(ci.NumPending), &inFlight
		}
		out = append(out, q)
	}
	out = append(out, notify.QueueDepth{Name: t.DeadLetter, Role: notify.QueueDead, Ready: int64(held[t.DeadLetter])})
	return out, nil
}
