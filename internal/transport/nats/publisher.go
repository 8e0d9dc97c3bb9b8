package nats

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/transport/consume"
)

// Publisher publishes outbox events to the streams and waits for their
// acknowledgements: notification.requested to notifications.requested in
// NOTIFICATIONS, the status events to notifications.status.sent and
// .failed in NOTIFICATIONS_STATUS; any other type is refused. It connects on first use; the client reconnects on its
// own after an outage, and a call after the connection was closed for good
// connects again. It is safe for concurrent use; calls are serialized.
type Publisher struct {
	cfg  Config
	topo Topology

	mu     sync.Mutex
	closed bool
	nc     *natsgo.Conn
	js     jetstream.JetStream
	// declared is false until the streams were declared on this
	// connection, and again after a publish found no stream.
	declared bool
	// stop ends the context the connection's reconnections run under.
	stop context.CancelFunc
}

// NewPublisher returns a Publisher. It does not connect: the first Publish
// does.
func NewPublisher(cfg Config) (*Publisher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Publisher{cfg: cfg, topo: cfg.Topology()}, nil
}

// Publish publishes every event, with the contract's headers and the
// outbox id as Nats-Msg-Id, all of them before awaiting any
// acknowledgement, and returns the ids of the events the stream stored. An
// event the stream stored already (a re-publish within the duplicate
// window) counts as stored. An event not acknowledged within ConfirmTimeout
// or before ctx ends, or refused, is left out, and err says why. A stream
// that exists with settings herald cannot update to (ErrTopologyMismatch)
// is a notify.Permanent error.
func (p *Publisher) Publish(ctx context.Context, events []notify.Event) ([]int64, error) {
	if len(events) == 0 {
		return nil, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("publish: publisher is closed")
	}
	if err := p.connect(ctx); err != nil {
		if errors.Is(err, ErrTopologyMismatch) {
			// A stream no retry can cure (a status stream that is not
			// herald's, say): the relay stops loudly instead of stalling.
			return nil, notify.Permanent(fmt.Errorf("publish: %w", err))
		}
		return nil, fmt.Errorf("publish: %w", err)
	}

	var errs []error
	futures := make([]jetstream.PubAckFuture, len(events))
	for i, ev := range events {
		subject, stream, ok := p.topo.subject(ev.Type)
		if !ok {
			errs = append(errs, fmt.Errorf("event %d: no subject for event type %q", ev.ID, ev.Type))
			continue
		}
		id := notify.FormatID(ev.ID)
		m := natsgo.NewMsg(subject)
		m.Header.Set(HeaderMessageID, id)
		m.Header.Set(HeaderType, ev.Type)
		m.Header.Set(HeaderContentType, contentType)
		m.Header.Set(HeaderOccurredAt, strconv.FormatInt(ev.OccurredAt.UnixMicro(), 10))
		if ev.Traceparent != "" {
			m.Header.Set(HeaderTraceparent, ev.Traceparent)
		}
		if p := ev.Priority.OrDefault(); p != notify.PriorityNormal {
			m.Header.Set(HeaderPriority, string(p))
		}
		m.Data = ev.Payload
		f, err := p.js.PublishMsgAsync(m, jetstream.WithMsgID(id), jetstream.WithExpectStream(stream),
			jetstream.WithStallWait(p.cfg.ConfirmTimeout))
		if err != nil {
			errs = append(errs, fmt.Errorf("publish event %d: %w", ev.ID, err))
			break
		}
		futures[i] = f
	}

	timer := time.NewTimer(p.cfg.ConfirmTimeout)
	defer timer.Stop()
	confirmed := make([]int64, 0, len(events))
	var refused, unconfirmed []string
	var firstRefusal error
	waiting := true
	for i, f := range futures {
		if f == nil {
			continue
		}
		var (
			acked bool
			err   error
		)
		if waiting {
			select {
			case <-f.Ok():
				acked = true
			case err = <-f.Err():
			case <-timer.C:
				waiting = false
				errs = append(errs, fmt.Errorf("stream did not acknowledge within %s", p.cfg.ConfirmTimeout))
			case <-ctx.Done():
				waiting = false
				errs = append(errs, fmt.Errorf("wait for acknowledgements: %w", ctx.Err()))
			}
		}
		if !waiting {
			select {
			case <-f.Ok():
				acked = true
			case err = <-f.Err():
			default:
			}
		}
		id := notify.FormatID(events[i].ID)
		switch {
		case acked:
			confirmed = append(confirmed, events[i].ID)
		case err != nil:
			if firstRefusal == nil {
				firstRefusal = err
			}
			if noStream(err) {
				p.declared = false
			}
			refused = append(refused, id)
		default:
			unconfirmed = append(unconfirmed, id)
		}
	}
	if len(refused) > 0 {
		errs = append(errs, fmt.Errorf("%d events not stored (%s): %w", len(refused), consume.SampleIDs(refused), firstRefusal))
	}
	if len(unconfirmed) > 0 {
		errs = append(errs, fmt.Errorf("%d events not acknowledged (%s)", len(unconfirmed), consume.SampleIDs(unconfirmed)))
	}
	if err := errors.Join(errs...); err != nil {
		return confirmed, fmt.Errorf("publish %d events, %d stored: %w", len(events), len(confirmed), err)
	}
	return confirmed, nil
}

// noStream reports whether a publish failed because no stream took the
// subject: the stream was deleted (or never declared).
func noStream(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, natsgo.ErrNoResponders)
}

// connect makes sure a connection exists and both streams are declared.
func (p *Publisher) connect(ctx context.Context) error {
	if p.nc != nil && p.nc.IsClosed() {
		p.drop()
	}
	if p.nc == nil {
		// The connection outlives this call: its reconnections end with
		// Close, not with ctx.
		cctx, stop := context.WithCancel(context.Background())
		nc, err := p.cfg.connect(ctx, cctx, "publisher", nil)
		if err != nil {
			stop()
			return err
		}
		js, err := jetstream.New(nc,
			jetstream.WithPublishAsyncMaxPending(asyncMaxPending),
			jetstream.WithPublishAsyncTimeout(p.cfg.ConfirmTimeout))
		if err != nil {
			nc.Close()
			stop()
			return fmt.Errorf("open jetstream: %w", err)
		}
		p.nc, p.js, p.stop, p.declared = nc, js, stop, false
	}
	if !p.declared {
		if _, err := p.topo.declareStream(ctx, p.js, p.cfg); err != nil {
			return err
		}
		if _, err := p.topo.declareStatusStream(ctx, p.js, p.cfg); err != nil {
			return err
		}
		p.declared = true
	}
	return nil
}

// asyncMaxPending bounds the publishes awaiting acknowledgement; more make
// PublishMsgAsync wait (up to ConfirmTimeout) for room.
const asyncMaxPending = 4096

// drop closes the connection, if any, so that the next call connects.
func (p *Publisher) drop() {
	if p.nc != nil {
		p.nc.Close()
	}
	if p.stop != nil {
		p.stop()
	}
	p.nc, p.js, p.stop, p.declared = nil, nil, nil, false
}

// Close closes the connection, after flushing what it buffered. Publish
// fails afterwards.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.drop()
	return nil
}
