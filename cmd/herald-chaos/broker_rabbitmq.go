package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/transport/kafka"
	heraldnats "github.com/heraldhq/herald/internal/transport/nats"
)

// rawMsg is a message the harness puts on the broker itself, as the relay
// would: a poison message, or a copy of an event already relayed.
type rawMsg struct {
	id   int64
	typ  string
	body []byte
	at   time.Time
}

// errNotApplicable marks a fault the transport has no counterpart for; the
// schedule leaves such faults out, this only guards a mistake.
var errNotApplicable = errors.New("not applicable to this transport")

// broker is what the faults and the checks need of one transport's broker,
// reached straight (never through the fault proxy).
type broker interface {
	// publish puts msgs where the relay publishes, each confirmed.
	publish(ctx context.Context, msgs []rawMsg) error
	// waiting counts the messages still to do in the broker's work queues
	// (sends and retries), for the drain; ok false when it cannot tell.
	waiting(ctx context.Context) (n int, where string, err error)
	// deadLetters returns the distinct message ids of the dead letters and
	// their total.
	deadLetters(ctx context.Context) (map[int64]bool, int, error)
	// purge empties the queue workers consume, as an operator's purge
	// would, and returns how many messages went.
	purge(ctx context.Context) (int, error)
}

// amqpBroker is RabbitMQ: the queues of herald's contract on one vhost.
type amqpBroker struct{ url string }

func (b amqpBroker) channel() (*amqp.Channel, func(), error) {
	conn, err := amqp.DialConfig(b.url, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		return nil, nil, fmt.Errorf("dial broker: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("open channel: %w", err)
	}
	return ch, func() { conn.Close() }, nil
}

func (b amqpBroker) publish(ctx context.Context, msgs []rawMsg) error {
	ch, closeCh, err := b.channel()
	if err != nil {
		return err
	}
	defer closeCh()
	for _, m := range msgs {
		if err := publishConfirmed(ctx, ch, m.id, m.typ, m.body, m.at); err != nil {
			return fmt.Errorf("publish %d: %w", m.id, err)
		}
	}
	return nil
}

func (b amqpBroker) waiting(ctx context.Context) (int, string, error) {
	total, where := 0, ""
	for _, q := range []string{"notifications.send", "notifications.send.high", "notifications.retry"} {
		// A failed passive declare closes its channel: one each.
		ch, closeCh, err := b.channel()
		if err != nil {
			return 0, "", err
		}
		qi, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		closeCh()
		var aerr *amqp.Error
		if errors.As(err, &aerr) && aerr.Code == amqp.NotFound {
			// Deleted by the retry-queue fault and not declared again
			// yet: nothing waits in it.
			continue
		}
		if err != nil {
			return 0, "", fmt.Errorf("inspect %s: %w", q, err)
		}
		if qi.Messages > 0 && where == "" {
			where = q
		}
		total += qi.Messages
	}
	return total, where, nil
}

func (b amqpBroker) deadLetters(ctx context.Context) (map[int64]bool, int, error) {
	ch, closeCh, err := b.channel()
	if err != nil {
		return nil, 0, err
	}
	// Closing the channel hands every message read back to the queue.
	defer closeCh()
	ids := map[int64]bool{}
	n := 0
	for range 100000 {
		d, ok, err := ch.Get("notifications.send.dlq", false)
		if err != nil {
			return nil, 0, fmt.Errorf("read the dead letters: %w", err)
		}
		if !ok {
			break
		}
		n++
		addID(ids, d.MessageId)
	}
	return ids, n, nil
}

func (b amqpBroker) purge(ctx context.Context) (int, error) {
	ch, closeCh, err := b.channel()
	if err != nil {
		return 0, err
	}
	defer closeCh()
	n, err := ch.QueuePurge("notifications.send", false)
	if err != nil {
		return 0, fmt.Errorf("purge notifications.send: %w", err)
	}
	return n, nil
}

// deleteRetryQueue deletes notifications.retry with whatever waits in it.
func (b amqpBroker) deleteRetryQueue(ctx context.Context) (int, error) {
	ch, closeCh, err := b.channel()
	if err != nil {
		return 0, err
	}
	defer closeCh()
	n, err := ch.QueueDelete("notifications.retry", false, false, false)
	if err != nil {
		return 0, fmt.Errorf("delete notifications.retry: %w", err)
	}
	return n, nil
}

func addID(ids map[int64]bool, s string) {
	if id, err := strconv.ParseInt(s, 10, 64); err == nil {
		ids[id] = true
	} else {
		ids[-1] = true
	}
}

// natsBroker is NATS JetStream: the stream of herald's contract.
type natsBroker struct {
	url string
	top heraldnats.Topology
}

func (b natsBroker) js() (*natsgo.Conn, jetstream.JetStream, error) {
	nc, err := natsgo.Connect(b.url, natsgo.Timeout(10*time.Second), natsgo.MaxReconnects(0), natsgo.Name("herald-chaos"))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to nats: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

func (b natsBroker) publish(ctx context.Context, msgs []rawMsg) error {
	nc, js, err := b.js()
	if err != nil {
		return err
	}
	defer nc.Close()
	for _, m := range msgs {
		msg := natsgo.NewMsg(b.top.Requested)
		msg.Data = m.body
		id := strconv.FormatInt(m.id, 10)
		msg.Header.Set(heraldnats.HeaderMessageID, id)
		msg.Header.Set(heraldnats.HeaderType, m.typ)
		msg.Header.Set(heraldnats.HeaderContentType, "application/json")
		msg.Header.Set(heraldnats.HeaderOccurredAt, strconv.FormatInt(m.at.UnixMicro(), 10))
		// A Nats-Msg-Id of its own: the stream's duplicate window would
		// absorb a copy under the relay's, and the worker must meet it.
		msg.Header.Set(natsgo.MsgIdHdr, "chaos-"+id+"-"+suffix())
		pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		_, err := js.PublishMsg(pctx, msg)
		cancel()
		if err != nil {
			return fmt.Errorf("publish %d: %w", m.id, err)
		}
	}
	return nil
}

func (b natsBroker) subjects(ctx context.Context) (map[string]uint64, error) {
	nc, js, err := b.js()
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	s, err := js.Stream(ctx, b.top.Stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", b.top.Stream, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		return nil, fmt.Errorf("stream %s info: %w", b.top.Stream, err)
	}
	return info.State.Subjects, nil
}

// waiting counts what herald's two durable consumers still have to do:
// messages not yet delivered and deliveries not yet acknowledged. Not the
// stream's own count: after a kill -9 of nats-server, a work-queue stream
// was seen keeping messages its consumer had acknowledged (the ack floor
// past them, nothing pending), which no worker will ever get; they are
// reported in the log, not waited for.
func (b natsBroker) waiting(ctx context.Context) (int, string, error) {
	nc, js, err := b.js()
	if err != nil {
		return 0, "", err
	}
	defer nc.Close()
	s, err := js.Stream(ctx, b.top.Stream)
	if err != nil {
		return 0, "", fmt.Errorf("stream %s: %w", b.top.Stream, err)
	}
	n, where := 0, ""
	for _, name := range []string{b.top.WorkerConsumer, b.top.RetryConsumer} {
		c, err := s.Consumer(ctx, name)
		if err != nil {
			return 0, "", fmt.Errorf("consumer %s: %w", name, err)
		}
		ci, err := c.Info(ctx)
		if err != nil {
			return 0, "", fmt.Errorf("consumer %s info: %w", name, err)
		}
		left := int(ci.NumPending) + ci.NumAckPending
		if left > 0 && where == "" {
			where = "consumer " + name
		}
		n += left
	}
	return n, where, nil
}

// stale counts the messages left on the send and retry subjects of the
// stream once every consumer is done: messages acknowledged whose deletion
// the stream lost (see waiting).
func (b natsBroker) stale(ctx context.Context) (int, error) {
	subj, err := b.subjects(ctx)
	if err != nil {
		return 0, err
	}
	return int(subj[b.top.Requested] + subj[b.top.Retry]), nil
}

func (b natsBroker) deadLetters(ctx context.Context) (map[int64]bool, int, error) {
	nc, js, err := b.js()
	if err != nil {
		return nil, 0, err
	}
	defer nc.Close()
	s, err := js.Stream(ctx, b.top.Stream)
	if err != nil {
		return nil, 0, fmt.Errorf("stream %s: %w", b.top.Stream, err)
	}
	ids := map[int64]bool{}
	n := 0
	for seq := uint64(1); ; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(b.top.DeadLetter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return ids, n, nil
		}
		if err != nil {
			return nil, 0, fmt.Errorf("read the dead letters: %w", err)
		}
		n++
		addID(ids, m.Header.Get(heraldnats.HeaderMessageID))
		seq = m.Sequence + 1
	}
}

func (b natsBroker) purge(ctx context.Context) (int, error) {
	nc, js, err := b.js()
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	s, err := js.Stream(ctx, b.top.Stream)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", b.top.Stream, err)
	}
	before, err := s.Info(ctx, jetstream.WithSubjectFilter(b.top.Requested))
	if err != nil {
		return 0, err
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(b.top.Requested)); err != nil {
		return 0, fmt.Errorf("purge %s: %w", b.top.Requested, err)
	}
	return int(before.State.Subjects[b.top.Requested]), nil
}

// kafkaBroker is the in-process kfake cluster.
type kafkaBroker struct {
	kc      *kfake.Cluster
	brokers []string
}

func (b kafkaBroker) client(opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.brokers...)}, opts...)...)
}

func (b kafkaBroker) publish(ctx context.Context, msgs []rawMsg) error {
	cl, err := b.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	for _, m := range msgs {
		id := strconv.FormatInt(m.id, 10)
		r := &kgo.Record{
			Topic: kafka.TopicRequested,
			Key:   []byte("chaos-" + id),
			Value: m.body,
			Headers: []kgo.RecordHeader{
				{Key: kafka.HeaderMessageID, Value: []byte(id)},
				{Key: kafka.HeaderContentType, Value: []byte("application/json")},
				{Key: kafka.HeaderType, Value: []byte(m.typ)},
				{Key: kafka.HeaderOccurredAt, Value: []byte(strconv.FormatInt(m.at.UnixMicro(), 10))},
			},
		}
		pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := cl.ProduceSync(pctx, r).FirstErr()
		cancel()
		if err != nil {
			return fmt.Errorf("produce %d: %w", m.id, err)
		}
	}
	return nil
}

// waiting cannot be told on a log: what is still to do is the consumer
// group's lag, which the database already shows.
func (b kafkaBroker) waiting(ctx context.Context) (int, string, error) { return 0, "", nil }

func (b kafkaBroker) deadLetters(ctx context.Context) (map[int64]bool, int, error) {
	ids := map[int64]bool{}
	if b.kc.TopicInfo(kafka.TopicDeadLetters) == nil {
		return ids, 0, nil
	}
	// The end of each partition now: read up to there.
	ends := map[int32]int64{}
	for _, p := range b.kc.PartitionInfos(kafka.TopicDeadLetters) {
		if p.HighWatermark > 0 {
			ends[p.Partition] = p.HighWatermark
		}
	}
	if len(ends) == 0 {
		return ids, 0, nil
	}
	cl, err := b.client(kgo.ConsumeTopics(kafka.TopicDeadLetters), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, 0, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n := 0
	for len(ends) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, 0, fmt.Errorf("read the dead letters: %w", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			n++
			for _, h := range r.Headers {
				if h.Key == kafka.HeaderMessageID {
					addID(ids, string(h.Value))
				}
			}
			if end, ok := ends[r.Partition]; ok && r.Offset+1 >= end {
				delete(ends, r.Partition)
			}
		})
	}
	return ids, n, nil
}

func (b kafkaBroker) purge(ctx context.Context) (int, error) {
	n := 0
	for _, p := range b.kc.PartitionInfos(kafka.TopicRequested) {
		n += int(p.HighWatermark - p.LogStartOffset)
		if err := b.kc.DeleteRecords(kafka.TopicRequested, p.Partition, -1); err != nil {
			return n, fmt.Errorf("delete records of %s/%d: %w", kafka.TopicRequested, p.Partition, err)
		}
	}
	return n, nil
}
