package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/transport/consume"
)

// handBackTimeout bounds the hand-backs (visibility 0) of a stopping
// Consumer; one that does not reach SQS comes back after the visibility
// timeout.
const handBackTimeout = 2 * time.Second

// Consumer receives from the send queue with long polling and hands each
// message to a handler, with up to Prefetch in flight. See the package
// documentation for what each settlement does.
type Consumer struct {
	cfg Config
	q   *queues
}

// NewConsumer returns a Consumer. It does not connect: Consume does.
func NewConsumer(cfg Config) (*Consumer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Consumer{cfg: cfg, q: &queues{cfg: cfg}}, nil
}

// Consume receives and handles messages until ctx ends. Then it stops
// receiving, gives the handlers in flight ShutdownGrace before cancelling
// their context, hands every message left unsettled back (visibility 0)
// and returns nil. A failing receive (SQS unreachable, the queue deleted)
// is logged and tried again with a backoff; a deleted queue is declared
// again.
func (c *Consumer) Consume(ctx context.Context, handle notify.Handler) error {
	// The handlers' grace starts when ctx ends, while the last receive
	// may still be under way.
	hctx, cancelHandlers := consume.HandlerContext(ctx, c.cfg.ShutdownGrace)
	defer cancelHandlers()
	var (
		wg      sync.WaitGroup
		pending consume.Held[*delivery] // returned by their handler unsettled
	)
	acks := make(chan ackReq)
	ackDone := make(chan struct{})
	var ackers sync.WaitGroup
	ackers.Go(func() { c.ackLoop(acks, ackDone) })
	defer func() {
		close(ackDone)
		ackers.Wait()
	}()
	slots := make(chan struct{}, c.cfg.Prefetch)
	backoff := consume.Backoff{Min: c.cfg.ReconnectMin, Max: c.cfg.ReconnectMax}
	failing := false
	for ctx.Err() == nil {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		n := 1
		for n < min(batchSize, c.cfg.Prefetch) {
			select {
			case slots <- struct{}{}:
				n++
				continue
			default:
			}
			break
		}
		msgs, err := c.receive(ctx, n)
		for range n - len(msgs) {
			<-slots
		}
		if ctx.Err() != nil && len(msgs) > 0 {
			// Received while stopping: hand them back at once.
			c.handBack(msgs)
			for range msgs {
				<-slots
			}
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if !failing {
				// A receive whose answer was lost on its way back took its
				// messages all the same: they come back after the
				// visibility timeout.
				c.cfg.Logger.Warn("sqs receive failed; retrying (what it may have taken comes back after the visibility timeout)",
					"queue", c.cfg.Topology().Send, "visibility_timeout", c.cfg.VisibilityTimeout, "err", err)
			}
			failing = true
			backoff.Wait(ctx)
			continue
		}
		if failing {
			c.cfg.Logger.Info("sqs receive works again", "queue", c.cfg.Topology().Send)
			failing = false
		}
		backoff.Reset()
		for _, m := range msgs {
			wg.Go(func() {
				defer func() { <-slots }()
				if d := c.dispatch(hctx, m, handle, acks); d != nil {
					pending.Add(d)
				}
			})
		}
	}

	wg.Wait()
	hb, cancel := context.WithTimeout(context.WithoutCancel(ctx), handBackTimeout)
	defer cancel()
	var back sync.WaitGroup
	for _, d := range pending.Take() {
		if d.unsettled() {
			back.Go(func() {
				if err := d.Release(hb, 0); err != nil {
					c.cfg.Logger.Warn("sqs hand-back failed; the message comes back after its visibility timeout", "message_id", d.msg.ID, "err", err)
				}
			})
		}
	}
	back.Wait()
	return nil
}

// handBack makes messages received while stopping visible again, all at
// once: under load, one after another they could outlast the bound.
func (c *Consumer) handBack(msgs []types.Message) {
	ctx, cancel := context.WithTimeout(context.Background(), handBackTimeout)
	defer cancel()
	client, send, _, err := c.q.urls(ctx)
	if err != nil {
		c.cfg.Logger.Warn("sqs hand-back failed; the messages come back after their visibility timeout", "messages", len(msgs), "err", err)
		return
	}
	var back sync.WaitGroup
	for _, m := range msgs {
		back.Go(func() {
			if _, err := client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
				QueueUrl: aws.String(send), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0,
			}); err != nil {
				c.cfg.Logger.Warn("sqs hand-back failed; the message comes back after its visibility timeout", "sqs_message_id", aws.ToString(m.MessageId), "err", err)
			}
		})
	}
	back.Wait()
}

// receive asks for up to n messages, declaring the queues first if needed.
// A receive is not cancelled when ctx ends (it ends within WaitTime): the
// messages of a receive cancelled on its way back would stay invisible for
// a whole visibility timeout. What it returns once ctx ended is handed
// back.
func (c *Consumer) receive(ctx context.Context, n int) ([]types.Message, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.WaitTime+30*time.Second)
	defer cancel()
	client, send, _, err := c.q.urls(ctx)
	if err != nil {
		return nil, err
	}
	out, err := client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
		QueueUrl:              aws.String(send),
		MaxNumberOfMessages:   int32(n),
		WaitTimeSeconds:       int32(c.cfg.WaitTime / time.Second),
		VisibilityTimeout:     int32(seconds(c.cfg.VisibilityTimeout)),
		MessageAttributeNames: []string{"All"},
		AttributeNames:        []types.QueueAttributeName{"ApproximateReceiveCount"},
	})
	if err != nil {
		if isMissingQueue(err) {
			c.q.forget()
			return nil, fmt.Errorf("receive from %s at %s: the queue does not exist; declaring it again: %w", c.cfg.Topology().Send, c.cfg.where(), err)
		}
		return nil, fmt.Errorf("receive from %s at %s: %w", c.cfg.Topology().Send, c.cfg.where(), err)
	}
	return out.Messages, nil
}

// dispatch handles one received message: a message that is not herald's
// is dead-lettered with the reason, a retry copy still to be held is held
// (see hold), and any other is handed to handle while its visibility is
// extended. It returns the delivery when handle returned without settling
// it (to be handed back when the Consumer stops).
func (c *Consumer) dispatch(ctx context.Context, m types.Message, handle notify.Handler, acks chan<- ackReq) *delivery {
	client, send, dlq, err := c.q.urls(ctx)
	if err != nil {
		return nil // it comes back after its visibility timeout
	}
	d := &delivery{c: c, client: client, send: send, dlq: dlq, raw: m, acks: acks}
	dec, err := decode(m)
	if err != nil {
		if err := d.DeadLetter(ctx, err.Error()); err != nil {
			c.cfg.Logger.Warn("sqs: dead-lettering a message that is not herald's failed", "sqs_message_id", aws.ToString(m.MessageId), "err", err)
		}
		return nil
	}
	d.msg = dec.msg
	if dec.hold > 0 {
		if err := c.hold(ctx, d, dec.hold); err != nil {
			c.cfg.Logger.Warn("sqs: holding a retry failed; it comes back after its visibility timeout", "message_id", d.msg.ID, "err", err)
		}
		return nil
	}

	stop := make(chan struct{})
	var ext sync.WaitGroup
	ext.Go(func() { c.extend(ctx, d, stop) })
	handle(ctx, d)
	close(stop)
	ext.Wait()
	if d.unsettled() {
		return d
	}
	return nil
}

// hold keeps a retry copy back for the rest of its delay. On a standard
// queue it hops: a copy delayed by up to 15 more minutes replaces it. A
// FIFO queue has no per-message delay: its copy is made invisible for the
// rest of the delay (at most 12 hours) on its first receipt, and handled on
// the next.
func (c *Consumer) hold(ctx context.Context, d *delivery, rest time.Duration) error {
	if c.cfg.FIFO {
		if receiveCount(d.raw) > 1 {
			return nil
		}
		_, err := d.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(d.send), ReceiptHandle: d.raw.ReceiptHandle,
			VisibilityTimeout: int32(seconds(min(rest, maxVisibility-time.Minute))),
		})
		return err
	}
	last := ""
	if v, ok := d.raw.MessageAttributes[AttrLastError]; ok {
		last = aws.ToString(v.StringValue)
	}
	cp := copyOf(d.raw, d.msg.RetryCount, last, 0, false, "")
	left := cp.withDelay(rest, false)
	if left > 0 {
		cp.attrs[AttrHold] = numberAttr(left.Milliseconds())
	}
	return d.replace(ctx, d.send, cp)
}

func receiveCount(m types.Message) int {
	n, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
	return n
}

// extend keeps d invisible while its handler runs: every third of the
// visibility timeout it is set to the whole timeout again.
func (c *Consumer) extend(ctx context.Context, d *delivery, stop <-chan struct{}) {
	every := c.cfg.VisibilityTimeout / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !d.unsettled() {
			return
		}
		_, err := d.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(d.send), ReceiptHandle: d.raw.ReceiptHandle,
			VisibilityTimeout: int32(seconds(c.cfg.VisibilityTimeout)),
		})
		if err != nil && ctx.Err() == nil {
			c.cfg.Logger.Warn("sqs: extending a message's visibility failed; another worker may receive it (its claim stops a second send)", "message_id", d.msg.ID, "err", err)
		}
	}
}

// delivery is one received message and the means to settle it, once.
type delivery struct {
	c         *Consumer
	client    *awssqs.Client
	send, dlq string
	raw       types.Message
	msg       notify.Message
	acks      chan<- ackReq

	once consume.Once
}

var errSettled = errors.New("sqs: delivery already settled")

func (d *delivery) unsettled() bool { return !d.once.Settled() }

// settle runs fn unless d was settled, and marks d settled when fn
// succeeded (or reports that it did its part: stored reports that the copy
// was stored even if removing the original failed).
func (d *delivery) settle(fn func() (stored bool, err error)) error {
	if err := d.once.Do(fn); !errors.Is(err, consume.ErrSettled) {
		return err
	}
	return errSettled
}

// Message returns the delivered message.
func (d *delivery) Message() notify.Message { return d.msg }

// Ack deletes the message, in a DeleteMessageBatch with the other acks
// waiting at the same moment.
func (d *delivery) Ack(ctx context.Context) error {
	return d.settle(func() (bool, error) {
		req := ackReq{client: d.client, queue: d.send, handle: aws.ToString(d.raw.ReceiptHandle), done: make(chan error, 1)}
		select {
		case d.acks <- req:
		case <-ctx.Done():
			return false, fmt.Errorf("ack message %d: %w", d.msg.ID, ctx.Err())
		}
		select {
		case err := <-req.done:
			if err != nil {
				return false, fmt.Errorf("ack message %d: %w", d.msg.ID, err)
			}
			return true, nil
		case <-ctx.Done():
			return false, fmt.Errorf("ack message %d: %w", d.msg.ID, ctx.Err())
		}
	})
}

// ackReq is one Ack waiting for its deletion.
type ackReq struct {
	client *awssqs.Client
	queue  string
	handle string
	done   chan error
}

// ackLoop deletes acknowledged messages: it takes an ack, then every
// other one already waiting (up to ten), and sends them in one
// DeleteMessageBatch, so that a busy worker makes one request per ten
// acks and an idle one waits for nothing.
func (c *Consumer) ackLoop(acks <-chan ackReq, done <-chan struct{}) {
	for {
		var batch []ackReq
		select {
		case r := <-acks:
			batch = append(batch, r)
		case <-done:
			return
		}
	more:
		for len(batch) < batchSize {
			select {
			case r := <-acks:
				batch = append(batch, r)
			default:
				break more
			}
		}
		c.deleteBatch(batch)
	}
}

// deleteBatch deletes one batch and answers each ack. An entry SQS
// reports neither deleted nor failed (goaws drops those it cannot find)
// counts as failed.
func (c *Consumer) deleteBatch(batch []ackReq) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in := &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(batch[0].queue)}
	for i, r := range batch {
		in.Entries = append(in.Entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(r.handle)})
	}
	out, err := batch[0].client.DeleteMessageBatch(ctx, in)
	if err != nil {
		for _, r := range batch {
			r.done <- fmt.Errorf("delete: %w", err)
		}
		return
	}
	res := make([]error, len(batch))
	for i := range res {
		res[i] = errors.New("delete: SQS did not report the entry deleted")
	}
	for _, e := range out.Successful {
		if i, err := strconv.Atoi(aws.ToString(e.Id)); err == nil && i >= 0 && i < len(res) {
			res[i] = nil
		}
	}
	for _, e := range out.Failed {
		if i, err := strconv.Atoi(aws.ToString(e.Id)); err == nil && i >= 0 && i < len(res) {
			res[i] = fmt.Errorf("delete: %s: %s", aws.ToString(e.Code), aws.ToString(e.Message))
		}
	}
	for i, r := range batch {
		r.done <- res[i]
	}
}

// Retry sends a copy with the retry count one higher, delayed by the retry
// delay (see hold for delays SQS cannot take in one go), then deletes the
// original.
func (d *delivery) Retry(ctx context.Context, reason string) error {
	return d.settle(func() (bool, error) {
		n := d.msg.RetryCount + 1
		cp := copyOf(d.raw, n, reason, 0, d.c.cfg.FIFO, "r"+strconv.Itoa(n))
		rest := cp.withDelay(d.c.cfg.retryDelay(n), d.c.cfg.FIFO)
		if rest > 0 {
			cp.attrs[AttrHold] = numberAttr(max(rest.Milliseconds(), 1))
		}
		if err := d.replaceLocked(ctx, d.send, cp); err != nil {
			return !errors.Is(err, errNotStored), fmt.Errorf("retry message %d: %w", d.msg.ID, err)
		}
		return true, nil
	})
}

// DeadLetter sends a copy with the reason to the DLQ, then deletes the
// original.
func (d *delivery) DeadLetter(ctx context.Context, reason string) error {
	return d.settle(func() (bool, error) {
		cp := copyOf(d.raw, d.msg.RetryCount, reason, 0, d.c.cfg.FIFO, "dlq")
		if err := d.replaceLocked(ctx, d.dlq, cp); err != nil {
			return !errors.Is(err, errNotStored), fmt.Errorf("dead-letter message %d: %w", d.msg.ID, err)
		}
		return true, nil
	})
}

// Release makes the message visible again at once, unchanged.
func (d *delivery) Release(ctx context.Context, after time.Duration) error {
	return d.settle(func() (bool, error) {
		_, err := d.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(d.send), ReceiptHandle: d.raw.ReceiptHandle, VisibilityTimeout: 0,
		})
		if err != nil {
			return false, fmt.Errorf("release message %d: %w", d.msg.ID, err)
		}
		return true, nil
	})
}

var errNotStored = errors.New("copy not stored")

// replace stores cp on queueURL, then deletes the original, as a
// settlement outside of the settle methods (hops and messages that are not
// herald's).
func (d *delivery) replace(ctx context.Context, queueURL string, cp message) error {
	return d.settle(func() (bool, error) {
		err := d.replaceLocked(ctx, queueURL, cp)
		return err == nil || !errors.Is(err, errNotStored), err
	})
}

// replaceLocked stores cp, then deletes the original. An error wrapping
// errNotStored means that nothing changed.
func (d *delivery) replaceLocked(ctx context.Context, queueURL string, cp message) error {
	if _, err := d.client.SendMessage(ctx, cp.toSend(queueURL)); err != nil {
		if isMissingQueue(err) {
			d.c.q.forget()
		}
		return fmt.Errorf("%w: send: %w", errNotStored, err)
	}
	if err := d.remove(ctx); err != nil {
		return fmt.Errorf("the copy was stored, the original comes back after its visibility timeout (its claim stops a second send): %w", err)
	}
	return nil
}

func (d *delivery) remove(ctx context.Context) error {
	_, err := d.client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(d.send), ReceiptHandle: d.raw.ReceiptHandle})
	if err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	return nil
}
