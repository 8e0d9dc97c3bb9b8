package nats

import (
	"context"
	"errors"
	"fmt"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/heraldhq/herald/internal/transport/consume"
)

// deadLetterRole names the connection of the dead-letter operations
// ("herald dead letters" unless Config.ConnectionName says otherwise).
const deadLetterRole = "dead letters"

// DeadLetterCount returns the number of messages on notifications.dlq. A
// stream that was never declared holds no dead letters: 0.
func DeadLetterCount(ctx context.Context, cfg Config) (int, error) {
	cfg, nc, js, err := openJetStream(ctx, cfg, deadLetterRole)
	if err != nil {
		return 0, fmt.Errorf("count dead letters: %w", err)
	}
	defer nc.Close()
	t := cfg.Topology()
	s, err := js.Stream(ctx, t.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("count dead letters: %w", err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(t.DeadLetter))
	if err != nil {
		return 0, fmt.Errorf("count dead letters: %w", err)
	}
	return int(info.State.Subjects[t.DeadLetter]), nil
}

// RemoveDeadLetters deletes from notifications.dlq every message whose
// payload names one of notificationIDs (all copies), and returns how many it
// deleted. It is what a redrive does once the notifications have fresh
// events: the dead messages would otherwise stay as if still unresolved.
//
// It reads the dead letters in stream order without consuming them and
// deletes the ones asked for by sequence number, up to the last message the
// stream held when it began, so it ends even while new dead letters arrive.
// A message whose payload cannot be read names no notification and stays.
func RemoveDeadLetters(ctx context.Context, cfg Config, notificationIDs []int64) (removed int, err error) {
	if len(notificationIDs) == 0 {
		// Nothing to remove; a configuration that cannot work still fails.
		return 0, cfg.withDefaults().validate()
	}
	named := consume.NamesOneOf(notificationIDs)
	cfg, nc, js, err := openJetStream(ctx, cfg, deadLetterRole)
	if err != nil {
		return 0, fmt.Errorf("remove dead letters: %w", err)
	}
	defer nc.Close()
	err = eachDeadLetter(ctx, js, cfg.Topology(), func(s jetstream.Stream, m *jetstream.RawStreamMsg) error {
		if !named(m.Data) {
			return nil
		}
		if err := s.DeleteMsg(ctx, m.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("delete message %d: %w", m.Sequence, err)
		}
		removed++
		return nil
	})
	if err != nil {
		return removed, fmt.Errorf("remove dead letters: %w", err)
	}
	return removed, nil
}

// eachDeadLetter calls fn for every message on the dead-letter subject, in
// stream order, up to the stream's last sequence when it began.
func eachDeadLetter(ctx context.Context, js jetstream.JetStream, t Topology, fn func(jetstream.Stream, *jetstream.RawStreamMsg) error) error {
	s, err := js.Stream(ctx, t.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	last := s.CachedInfo().State.LastSeq
	for seq := uint64(1); seq <= last; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(t.DeadLetter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read dead letter at or after sequence %d: %w", seq, err)
		}
		if m.Sequence > last {
			return nil
		}
		if err := fn(s, m); err != nil {
			return err
		}
		seq = m.Sequence + 1
	}
	return nil
}

// openJetStream is how an operation of its own begins (a count, a
// removal, a probe): it fills cfg's defaults and checks them, then dials
// JetStream. It returns cfg as filled; the caller closes the connection.
func openJetStream(ctx context.Context, cfg Config, role string) (Config, *natsgo.Conn, jetstream.JetStream, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return cfg, nil, nil, err
	}
	nc, js, err := dialJetStream(ctx, cfg, role)
	return cfg, nc, js, err
}

// dialJetStream connects for one operation (role names the connection) and
// opens JetStream on it; the caller closes the connection.
func dialJetStream(ctx context.Context, cfg Config, role string) (*natsgo.Conn, jetstream.JetStream, error) {
	nc, err := cfg.connect(ctx, ctx, role, nil)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("open jetstream: %w", err)
	}
	return nc, js, nil
}
