package nats

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/heraldhq/herald/internal/notify"
)

// PeekedDeadLetter is one message on notifications.dlq as the tests see it.
type PeekedDeadLetter struct {
	ID     int64 // x-message-id; 0 when it has none
	Reason string
	Seq    uint64
}

// PeekDeadLetters lists the dead letters without removing them.
func PeekDeadLetters(ctx context.Context, cfg Config) ([]PeekedDeadLetter, error) {
	cfg = cfg.withDefaults()
	nc, js, err := dialJetStream(ctx, cfg, deadLetterRole)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	var out []PeekedDeadLetter
	err = eachDeadLetter(ctx, js, cfg.Topology(), func(_ jetstream.Stream, m *jetstream.RawStreamMsg) error {
		id, _ := notify.ParseID(m.Header.Get(HeaderMessageID))
		out = append(out, PeekedDeadLetter{ID: id, Reason: m.Header.Get(HeaderLastError), Seq: m.Sequence})
		return nil
	})
	return out, err
}
