package deployment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// Records answers the reader's counts and the processes' reports. The stores
// implement it.
type Records interface {
	// PendingStats counts the pending notifications and the age of the
	// oldest.
	PendingStats(ctx context.Context) (notify.PendingStats, error)
	// OutboxStats reports the outbox's backlog and the dead letters.
	OutboxStats(ctx context.Context) (notify.OutboxStats, error)
	// Processes lists the reports, each with its age.
	Processes(ctx context.Context) ([]notify.Process, error)
}

// Queues reports the depth of a transport's queues. A transport that can
// tell implements it (RabbitMQ, NATS, SQS, Kafka, the outbox table).
type Queues interface {
	QueueDepths(ctx context.Context) ([]notify.QueueDepth, error)
}

// ReaderConfig configures a Reader.
type ReaderConfig struct {
	// Transport names the transport, as the reports name it. Required.
	Transport string
	// Queues, when set, reports the transport's queues. Default: nil (the
	// transport cannot tell).
	Queues Queues
	// LiveWithin is how recent a report must be for its process to be
	// live. Required (LiveWithin(DefaultEvery)).
	LiveWithin time.Duration
	// QueueCache is how long the queues' depths are reused, so that many
	// consoles open at once ask the broker once. Default (zero): none.
	QueueCache time.Duration
	// QueueTimeout bounds the broker's answer: a broker that hangs must
	// not hold the page. Required.
	QueueTimeout time.Duration
	// Logger receives the broker's failures, which the reports only name.
	// Default: discard.
	Logger *slog.Logger
}

// Reader gathers a notify.Deployment.
type Reader struct {
	st  Records
	cfg ReaderConfig
	log *slog.Logger

	mu       sync.Mutex
	cachedAt time.Time
	cached   []notify.QueueDepth
	cacheErr string
}

// NewReader returns a Reader over st.
func NewReader(st Records, cfg ReaderConfig) (*Reader, error) {
	if st == nil {
		return nil, errors.New("new deployment reader: a store is required")
	}
	if cfg.Transport == "" || cfg.LiveWithin <= 0 || cfg.QueueTimeout <= 0 || cfg.QueueCache < 0 {
		return nil, fmt.Errorf("new deployment reader: transport, a positive live window and queue timeout are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Reader{st: st, cfg: cfg, log: cfg.Logger}, nil
}

// Read gathers the deployment's state. A store failure fails it; a broker
// that does not answer is reported in QueueError, with the rest.
func (r *Reader) Read(ctx context.Context) (notify.Deployment, error) {
	d := notify.Deployment{At: time.Now().UTC(), Transport: r.cfg.Transport}
	var err error
	if d.Pending, err = r.st.PendingStats(ctx); err != nil {
		return notify.Deployment{}, err
	}
	if d.Outbox, err = r.st.OutboxStats(ctx); err != nil {
		return notify.Deployment{}, err
	}
	if d.Processes, err = r.st.Processes(ctx); err != nil {
		return notify.Deployment{}, err
	}
	for i := range d.Processes {
		d.Processes[i].Live = d.Processes[i].Age <= r.cfg.LiveWithin
	}
	if r.cfg.Queues != nil {
		d.QueuesKnown = true
		d.Queues, d.QueueError = r.queues(ctx)
	}
	return d, nil
}

// queues asks the transport, or reuses its last answer while it is fresh.
func (r *Reader) queues(ctx context.Context) ([]notify.QueueDepth, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.cachedAt.IsZero() && time.Since(r.cachedAt) < r.cfg.QueueCache {
		return r.cached, r.cacheErr
	}
	qctx, cancel := context.WithTimeout(ctx, r.cfg.QueueTimeout)
	defer cancel()
	qs, err := r.cfg.Queues.QueueDepths(qctx)
	r.cached, r.cacheErr = qs, ""
	if err != nil {
		if ctx.Err() != nil {
			// The caller went away: nothing learned about the broker.
			return nil, "the request ended before the broker answered"
		}
		// The error may quote an address or a name the page should not:
		// the log has it.
		r.log.Warn("the broker did not report its queues", "transport", r.cfg.Transport, "err", err)
		r.cached, r.cacheErr = nil, "the broker did not answer (the API's log has the error)"
	}
	r.cachedAt = time.Now()
	return r.cached, r.cacheErr
}
