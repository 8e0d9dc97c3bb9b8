package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/transport/consume"
)

// delivery implements notify.Delivery for one record of the requested
// topic.
type delivery struct {
	s *session
	e *entry

	// Delivered's Once makes settling once hold even against a confused
	// caller; it is closed (errReturned) when the handler returns: a
	// delivery its handler gave up is redelivered, not settled late.
	consume.Delivered
}

// Ack settles the record as done: its offset may be committed.
func (d *delivery) Ack(ctx context.Context) error {
	return d.Settle("ack", func() error { return d.s.settle(d.e) })
}

// Release hands the record back unchanged, without counting a retry. With
// after > 0 it parks it: a copy with the same retry count and after as its
// delay goes to the retry topic, and once the cluster acknowledged it the
// original is settled; the Consumer that reads the copy holds it for after
// and forwards it to the requested topic, as it does a retry. The parked
// record thus gives up its key (see "Order" in the package doc) and holds
// no handler. Should the copy not be acknowledged, the record goes out
// again at once, as it does with after <= 0: still first of its key.
func (d *delivery) Release(ctx context.Context, after time.Duration) error {
	return d.Settle("release", func() error {
		if after <= 0 {
			return d.s.requeue(d.e)
		}
		r := copyRecord(d.e.rec, d.s.topics.Retry, HeaderRetryDelay, HeaderDueAt)
		r.Headers = append(r.Headers,
			kgo.RecordHeader{Key: HeaderRetryDelay, Value: strconv.AppendInt(nil, ceilMillis(after), 10)})
		err := d.produceThenSettle(ctx, r)
		if err == nil || !errors.Is(err, errNotProduced) {
			return err
		}
		if rerr := d.s.requeue(d.e); rerr != nil {
			return errors.Join(err, rerr)
		}
		d.s.log.Warn("kafka: park copy not acknowledged; the record goes out again at once", "message_id", d.Msg.ID,
			"after", after, "err", err)
		return nil
	})
}

// ceilMillis is d in milliseconds, rounded up: a park is never short.
func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// errNotProduced marks a copy the cluster did not acknowledge: the
// original is still unsettled.
var errNotProduced = errors.New("copy not acknowledged, original left unsettled")

// Retry produces a copy with the retry count incremented and its delay to
// the retry topic, waits for the cluster's acknowledgement, and only then
// settles the original. The Consumer that reads the copy forwards it to the
// requested topic once it has held it for the delay, behind whatever its
// key received meanwhile.
func (d *delivery) Retry(ctx context.Context, reason string) error {
	return d.Settle("retry", func() error {
		n := d.Msg.RetryCount + 1
		delay := d.s.cfg.retryDelay(n)
		r := copyRecord(d.e.rec, d.s.topics.Retry, HeaderRetryCount, HeaderLastError, HeaderRetryDelay, HeaderDueAt)
		r.Headers = append(r.Headers,
			kgo.RecordHeader{Key: HeaderRetryCount, Value: strconv.AppendInt(nil, int64(n), 10)},
			kgo.RecordHeader{Key: HeaderLastError, Value: []byte(consume.Truncate(reason, consume.MaxReason))},
			kgo.RecordHeader{Key: HeaderRetryDelay, Value: strconv.AppendInt(nil, delay.Milliseconds(), 10)},
		)
		return d.produceThenSettle(ctx, r)
	})
}

// DeadLetter produces a copy with its reason to the dead-letter topic,
// waits for the cluster's acknowledgement, and only then settles the
// original.
func (d *delivery) DeadLetter(ctx context.Context, reason string) error {
	return d.Settle("dead-letter", func() error {
		r := copyRecord(d.e.rec, d.s.topics.DeadLetters, HeaderLastError, HeaderRetryDelay, HeaderDueAt, HeaderSource)
		r.Headers = append(r.Headers,
			kgo.RecordHeader{Key: HeaderLastError, Value: []byte(consume.Truncate(reason, consume.MaxReason))},
			kgo.RecordHeader{Key: HeaderSource, Value: []byte(source(d.e.rec))},
		)
		return d.produceThenSettle(ctx, r)
	})
}

func (d *delivery) produceThenSettle(ctx context.Context, r *kgo.Record) error {
	if err := produceAll(ctx, d.s.cl, d.s.cfg.ConfirmTimeout, []*kgo.Record{r})[0]; err != nil {
		return fmt.Errorf("%w: copy to %s: %w", errNotProduced, r.Topic, err)
	}
	return d.s.settle(d.e)
}

// errReturned is why a delivery cannot be settled once its handler
// returned without settling it.
var errReturned = errors.New("its handler returned without settling it; it is delivered again")

// message reads a record as herald's message. bad, when not empty, says
// why the record cannot be herald's (it has no usable message id) and is
// dead-lettered by the transport itself; a record with an id but a payload
// or type that is not herald's goes to the handler, which dead-letters it
// with the decoding error.
func message(r *kgo.Record) (m notify.Message, bad string) {
	m = notify.Message{
		Type:        header(r, HeaderType),
		Payload:     r.Value,
		RetryCount:  retryCount(header(r, HeaderRetryCount)),
		OccurredAt:  r.Timestamp,
		Traceparent: header(r, HeaderTraceparent),
		Priority:    notify.KnownPriority(header(r, HeaderPriority)),
	}
	if v, err := strconv.ParseInt(header(r, HeaderOccurredAt), 10, 64); err == nil && v > 0 {
		m.OccurredAt = time.UnixMicro(v)
	}
	if v, err := strconv.ParseInt(header(r, HeaderPublishedAt), 10, 64); err == nil && v > 0 {
		m.PublishedAt = time.UnixMicro(v)
	}
	raw := header(r, HeaderMessageID)
	id, ok := notify.ParseID(raw)
	if !ok {
		return m, fmt.Sprintf("not a herald message: header %s is %q, want an outbox id", HeaderMessageID, consume.Truncate(raw, 64))
	}
	m.ID = id
	return m, ""
}

// header returns the last value of a record header, "" when absent.
func header(r *kgo.Record, key string) string {
	v := ""
	for _, h := range r.Headers {
		if h.Key == key {
			v = string(h.Value)
		}
	}
	return v
}

func retryCount(s string) int {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0
	}
	return int(max(0, min(n, 1<<31-1)))
}

// holdFor is how long a Consumer holds a retry record from the moment it
// read it: the delay the copy carries (x-retry-delay-ms). A copy written
// before that header existed carries only x-due-at, a time of another
// machine's clock that herald does not compare with its own: it is held the
// schedule's delay for its retry count, as if written now (late by at most
// that delay, never early). A record with neither is not herald's retry
// copy and is forwarded at once.
func holdFor(r *kgo.Record, schedule func(retry int) time.Duration) time.Duration {
	if v, err := strconv.ParseInt(header(r, HeaderRetryDelay), 10, 64); err == nil {
		return time.Duration(max(0, min(v, maxHoldMillis))) * time.Millisecond
	}
	if header(r, HeaderDueAt) != "" {
		return schedule(retryCount(header(r, HeaderRetryCount)))
	}
	return 0
}

// maxHoldMillis caps the delay a copy may ask for (a year), so that a
// corrupt header cannot overflow a time.Duration.
const maxHoldMillis = 365 * 24 * 3600 * 1000

// copyRecord returns a copy of r for topic (same key, value, timestamp),
// with its headers less those named in drop.
func copyRecord(r *kgo.Record, topic string, drop ...string) *kgo.Record {
	c := &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
next:
	for _, h := range r.Headers {
		for _, k := range drop {
			if h.Key == k {
				continue next
			}
		}
		c.Headers = append(c.Headers, h)
	}
	return c
}

// source names where a record was read: topic/partition@offset.
func source(r *kgo.Record) string {
	return fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset)
}
