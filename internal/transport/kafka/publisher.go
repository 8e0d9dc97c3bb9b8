package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/notify"
)

// Publisher produces outbox events and waits for every in-sync replica to
// acknowledge them: notification.requested to the requested topic, the
// status events (notification.sent, notification.failed) to the status
// topic; an event of any other type is refused. It is safe for concurrent use;
// calls are serialized.
type Publisher struct {
	cfg    Config
	topics Topics
	cl     *kgo.Client
	adm    *kadm.Client

	mu sync.Mutex
	// ensured is false until the topics are known to exist, and again
	// after a produce found one missing.
	ensured, everEnsured bool
	closed               bool
}

// NewPublisher returns a Publisher. It does not connect: the first Publish
// does (and creates the topics when missing).
func NewPublisher(cfg Config) (*Publisher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	opts := append(cfg.ConnOpts(), cfg.producerOpts()...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return &Publisher{cfg: cfg, topics: cfg.Topics(), cl: cl, adm: kadm.NewClient(cl)}, nil
}

// Publish produces every event, keyed by its user id (a status event's
// payload carries it too), all of them before awaiting any
// acknowledgement, and returns the ids of the events the cluster
// acknowledged, in the order given. An event of a type herald does not
// publish is left out, and err names it. An event not acknowledged
// within ConfirmTimeout or before ctx ends is left out, and err says why.
// The producer is idempotent: a record retried inside the client is written
// once and in order.
func (p *Publisher) Publish(ctx context.Context, events []notify.Event) ([]int64, error) {
	if len(events) == 0 {
		return nil, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("publish: publisher is closed")
	}
	if !p.ensured {
		created, err := ensureTopics(ctx, p.adm, p.cfg, p.topics.all())
		if err != nil {
			return nil, fmt.Errorf("publish: %w", err)
		}
		if p.everEnsured {
			logRecreated(p.cfg.Logger, created)
			// The client never adopts a recreated topic's new id: forget
			// the old one.
			p.cl.PurgeTopicsFromProducing(p.topics.Requested, p.topics.Status)
		}
		p.ensured, p.everEnsured = true, true
	}

	var failed []error
	recs := make([]*kgo.Record, 0, len(events))
	sent := make([]notify.Event, 0, len(events))
	for _, ev := range events {
		topic, ok := p.topics.topic(ev.Type)
		if !ok {
			failed = append(failed, fmt.Errorf("event %d: no topic for event type %q", ev.ID, ev.Type))
			continue
		}
		recs = append(recs, eventRecord(topic, ev))
		sent = append(sent, ev)
	}
	errs := produceAll(ctx, p.cl, p.cfg.ConfirmTimeout, recs)
	confirmed := make([]int64, 0, len(events))
	for i, err := range errs {
		if err == nil {
			confirmed = append(confirmed, sent[i].ID)
			continue
		}
		if errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID) {
			p.ensured = false
		}
		failed = append(failed, fmt.Errorf("event %d: %w", sent[i].ID, err))
	}
	if len(failed) > 0 {
		return confirmed, fmt.Errorf("publish %d events, %d acknowledged: %w", len(events), len(confirmed), firstErrors(failed))
	}
	return confirmed, nil
}

// Close closes the client. Publish fails afterwards.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		p.cl.Close()
	}
	return nil
}

// eventRecord is the record of an outbox event: the payload keyed by the
// notification's user, with the message's headers.
func eventRecord(topic string, ev notify.Event) *kgo.Record {
	r := &kgo.Record{
		Topic:     topic,
		Key:       recordKey(ev.Payload, ev.ID),
		Value:     ev.Payload,
		Timestamp: ev.OccurredAt,
		Headers: []kgo.RecordHeader{
			{Key: HeaderMessageID, Value: []byte(notify.FormatID(ev.ID))},
			{Key: HeaderContentType, Value: []byte("application/json")},
			{Key: HeaderType, Value: []byte(ev.Type)},
			{Key: HeaderOccurredAt, Value: strconv.AppendInt(nil, ev.OccurredAt.UnixMicro(), 10)},
			{Key: HeaderPublishedAt, Value: strconv.AppendInt(nil, time.Now().UnixMicro(), 10)},
		},
	}
	if ev.Traceparent != "" {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderTraceparent, Value: []byte(ev.Traceparent)})
	}
	if p := ev.Priority.OrDefault(); p != notify.PriorityNormal {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderPriority, Value: []byte(p)})
	}
	return r
}

// recordKey is the user id of a payload: one user's notifications share a
// partition, and so their order. A payload without one (not herald's, or
// broken) is keyed by its message id, which spreads such records.
func recordKey(payload []byte, id int64) []byte {
	var p struct {
		UserID string `json:"user_id"`
	}
	if json.Unmarshal(payload, &p) == nil && p.UserID != "" {
		return []byte(p.UserID)
	}
	return []byte("message-" + notify.FormatID(id))
}

// produceAll produces recs and waits for their acknowledgements up to
// timeout or until ctx ends. errs[i] is nil when recs[i] was acknowledged.
// A record still unacknowledged when the wait ends counts as failed, even
// if the cluster acknowledges it later: its producer then retries it and
// the duplicate is absorbed downstream.
func produceAll(ctx context.Context, cl *kgo.Client, timeout time.Duration, recs []*kgo.Record) []error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var (
		mu   sync.Mutex
		errs = make([]error, len(recs))
		wg   sync.WaitGroup
	)
	pending := errors.New("not acknowledged in time")
	for i := range errs {
		errs[i] = pending
	}
	wg.Add(len(recs))
	for i, r := range recs {
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			mu.Lock()
			errs[i] = err
			mu.Unlock()
			wg.Done()
		})
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	out := append([]error(nil), errs...)
	for i, err := range out {
		if err == pending && ctx.Err() != nil {
			out[i] = fmt.Errorf("%w: %w", pending, ctx.Err())
		}
	}
	return out
}

// firstErrors joins the first few errors and counts the rest.
func firstErrors(errs []error) error {
	const max = 3
	if len(errs) <= max {
		return errors.Join(errs...)
	}
	return errors.Join(append(errs[:max:max], fmt.Errorf("and %d more", len(errs)-max))...)
}
