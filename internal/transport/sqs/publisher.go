package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/heraldhq/herald/internal/notify"
)

// batchSize is the most entries SQS takes in one SendMessageBatch.
const batchSize = 10

// Publisher sends outbox events with SendMessageBatch, ten at a time, and
// reports which SQS stored: notification.requested to the send queue, the
// status events (notification.sent, notification.failed) to the status
// queue; an event of any other type is refused. It declares the queues on
// first use, and again after SQS said the queue does not exist. It is safe
// for concurrent use.
type Publisher struct {
	cfg Config
	q   *queues

	mu     sync.Mutex
	closed bool
}

// NewPublisher returns a Publisher. It does not connect: the first Publish
// does.
func NewPublisher(cfg Config) (*Publisher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Publisher{cfg: cfg, q: &queues{cfg: cfg}}, nil
}

// Close marks the publisher closed.
func (p *Publisher) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	return nil
}

// Publish sends every event in batches of ten per queue, each entry
// checked: it returns the ids of the events SQS stored, in the order
// given, and an error for every entry or batch it refused, and for every
// event of a type herald does not publish, whose rows the relay leaves
// unprocessed to publish again.
func (p *Publisher) Publish(ctx context.Context, events []notify.Event) ([]int64, error) {
	if len(events) == 0 {
		return nil, nil
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, errors.New("publish: publisher is closed")
	}
	c, send, _, err := p.q.urls(ctx)
	if err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	topo := p.cfg.Topology()
	var requested, status []notify.Event
	var errs []error
	for _, ev := range events {
		switch {
		case ev.Type == notify.EventRequested:
			requested = append(requested, ev)
		case notify.IsStatusEvent(ev.Type):
			status = append(status, ev)
		default:
			errs = append(errs, fmt.Errorf("event %d: no queue for event type %q", ev.ID, ev.Type))
		}
	}
	stored := map[int64]bool{}
	for _, q := range []struct {
		name, url string
		events    []notify.Event
	}{{topo.Send, send, requested}, {topo.Status, p.q.statusURL(), status}} {
		for start := 0; start < len(q.events) && ctx.Err() == nil; start += batchSize {
			batch := q.events[start:min(start+batchSize, len(q.events))]
			ids, err := p.sendBatch(ctx, c, q.name, q.url, batch)
			for _, id := range ids {
				stored[id] = true
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := ctx.Err(); err != nil && len(stored) < len(requested)+len(status) {
		errs = append(errs, fmt.Errorf("publish: %w", err))
	}
	ids := make([]int64, 0, len(stored))
	for _, ev := range events {
		if stored[ev.ID] {
			ids = append(ids, ev.ID)
		}
	}
	return ids, errors.Join(errs...)
}

// sendBatch sends up to ten events to the queue name at queueURL and
// returns the ids SQS stored.
func (p *Publisher) sendBatch(ctx context.Context, c *awssqs.Client, name, queueURL string, batch []notify.Event) ([]int64, error) {
	in := &awssqs.SendMessageBatchInput{QueueUrl: aws.String(queueURL)}
	for _, ev := range batch {
		in.Entries = append(in.Entries, newMessage(ev, p.cfg.FIFO).toEntry(strconv.FormatInt(ev.ID, 10)))
	}
	out, err := c.SendMessageBatch(ctx, in)
	if err != nil {
		if isMissingQueue(err) {
			p.q.forget()
		}
		return nil, fmt.Errorf("publish %d events to %s at %s: %w", len(batch), name, p.cfg.where(), err)
	}
	ok := make(map[string]bool, len(out.Successful))
	for _, s := range out.Successful {
		ok[aws.ToString(s.Id)] = true
	}
	var errs []error
	for _, f := range out.Failed {
		errs = append(errs, failedEntry(f))
	}
	var ids []int64
	for _, ev := range batch {
		if ok[strconv.FormatInt(ev.ID, 10)] {
			ids = append(ids, ev.ID)
		}
	}
	if len(ids)+len(out.Failed) < len(batch) && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("publish: SQS answered for %d of %d entries", len(ids)+len(out.Failed), len(batch)))
	}
	return ids, errors.Join(errs...)
}

func failedEntry(f types.BatchResultErrorEntry) error {
	return fmt.Errorf("event %s refused: %s: %s", aws.ToString(f.Id), aws.ToString(f.Code), aws.ToString(f.Message))
}
