package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
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
	groups := &lanes{
		c: c, stop: ctx, handle: handle, acks: acks, wg: &wg, pending: &pending,
		free: func() { <-slots }, queued: map[string][]*delivery{}, moved: map[string]*movedCopies{},
	}
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
		if c.cfg.FIFO {
			// In receipt order: a group's messages queue behind each
			// other here, whichever receive brought them.
			groups.add(hctx, msgs)
			continue
		}
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
				if err := d.handBack(hb); err != nil {
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
		AttributeNames:        []types.QueueAttributeName{"ApproximateReceiveCount", "MessageGroupId"},
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

// dispatch handles one message of a standard queue (see open and run).
// It returns the delivery when handle returned without settling it (to be
// handed back when the Consumer stops).
func (c *Consumer) dispatch(ctx context.Context, m types.Message, handle notify.Handler, acks chan<- ackReq) *delivery {
	d := c.open(ctx, m, acks)
	if d == nil {
		return nil
	}
	left, _ := c.run(ctx, d, handle)
	return left
}

// open makes a received message a delivery and keeps it invisible from
// then on (see extend), also while it waits behind its FIFO group. A
// message that is not herald's is dead-lettered with the reason, and open
// returns nil; so it does when the queues cannot be named (the message
// comes back after its visibility timeout).
func (c *Consumer) open(ctx context.Context, m types.Message, acks chan<- ackReq) *delivery {
	client, send, dlq, err := c.q.urls(ctx)
	if err != nil {
		return nil
	}
	d := &delivery{c: c, client: client, send: send, dlq: dlq, raw: m, acks: acks}
	dec, err := decode(m)
	if err != nil {
		if err := d.DeadLetter(ctx, err.Error()); err != nil {
			c.cfg.Logger.Warn("sqs: dead-lettering a message that is not herald's failed", "sqs_message_id", aws.ToString(m.MessageId), "err", err)
		}
		return nil
	}
	d.msg, d.hold = dec.msg, dec.hold
	stop := make(chan struct{})
	var ext sync.WaitGroup
	ext.Go(func() { c.extend(ctx, d, stop) })
	d.stopExtend = sync.OnceFunc(func() {
		close(stop)
		ext.Wait()
	})
	return d
}

// run holds d if it is a copy with a delay still to wait (see hold), and
// hands it to handle otherwise. It returns d when handle returned without
// settling it, and reports whether the messages of d's FIFO group behind
// it must be handed back rather than handed over: d stays where it was in
// its queue (made invisible for a hold or a park, or left unsettled), or a
// park sent it to the end of its group (d.moved), where they must follow
// it.
func (c *Consumer) run(ctx context.Context, d *delivery, handle notify.Handler) (left *delivery, stays bool) {
	if d.hold > 0 {
		waits, err := c.hold(ctx, d)
		if err != nil {
			c.cfg.Logger.Warn("sqs: holding a delayed copy failed; it comes back after its visibility timeout", "message_id", d.msg.ID, "err", err)
		}
		if waits || err != nil {
			d.stopExtend()
			return nil, true
		}
	}
	handle(ctx, d)
	d.stopExtend()
	if d.unsettled() {
		return d, true
	}
	return nil, d.inPlace.Load() || d.moved.Load()
}

// hold keeps a copy (a retry's, a long park's) back for the rest of its
// delay, and reports whether it does (false: hand it to the handler now).
// On a standard queue it hops: a copy delayed by up to 15 more minutes
// replaces it. A FIFO queue has no per-message delay: the copy is made
// invisible for the rest of its delay (at most 12 hours) on its first
// receipt, which keeps its group behind it, and handed to the handler on
// any later one (ApproximateReceiveCount above 1: its hold was served, or
// a receive's answer was lost and it waited a visibility timeout). A copy
// whose hold would bring it near the redrive policy's count is handed over
// at once rather than risk the DLQ.
func (c *Consumer) hold(ctx context.Context, d *delivery) (waits bool, err error) {
	if c.cfg.FIFO {
		if receiveCount(d.raw) > 1 || !c.mayWait(d) {
			return false, nil
		}
		d.stopExtend() // an extension landing after the hold would undo it
		return true, d.wait(ctx, d.hold)
	}
	d.stopExtend()
	cp := copyOf(d.raw, d.msg.RetryCount, lastError(d.raw), 0, false, "")
	left := cp.withDelay(d.hold, false)
	if left > 0 {
		cp.attrs[AttrHold] = numberAttr(left.Milliseconds())
	}
	return true, d.replace(ctx, d.send, cp)
}

// mayWait reports whether d, a FIFO message, may wait by its visibility
// (which counts a receipt) and still stay far from the redrive policy's
// maxReceiveCount (the queue's, which may differ from the configuration's
// when the queue existed: see declare): its next receipt must be within
// half of it. The other half is margin for receipts herald does not see
// (answers lost on their way back, hand-backs at a stop).
func (c *Consumer) mayWait(d *delivery) bool {
	return receiveCount(d.raw)+1 <= c.q.maxReceiveCount()/2
}

func lastError(m types.Message) string {
	if v, ok := m.MessageAttributes[AttrLastError]; ok {
		return aws.ToString(v.StringValue)
	}
	return ""
}

func receiveCount(m types.Message) int {
	n, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
	return n
}

// extend keeps d invisible from its receipt until its handler returns
// (or, on a FIFO queue, until it is handed back unhandled): every third of
// the visibility timeout it is set to the whole timeout again.
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
	// hold is what is left of a copy's delay (AttrHold) when received.
	hold time.Duration
	// stopExtend ends extend and waits for it (idempotent).
	stopExtend func()
	// inPlace says a FIFO Release left the message where it is, invisible
	// for the park, ahead of the rest of its group; moved says it sent a
	// copy to the end of the group instead.
	inPlace, moved atomic.Bool
	// copyID is the SQS message id of the copy that replaced the message
	// on its own queue (a park's, a hop's, a retry's), once stored.
	copyID atomic.Pointer[string]

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

// Release parks the message unchanged (its retry count and last error
// kept) until after has passed, in a way no redrive policy counts and
// that holds no prefetch slot.
//
// On a standard queue it sends a copy delayed by after (a longer wait than
// SQS's 15 minutes hops, as a retry's does) and deletes the original: the
// copy is a new message, whose receive count starts again, so however
// often a notification is parked through an outage maxReceiveCount never
// reaches it.
//
// On a FIFO queue a copy would go to the end of its group, behind the
// user's later messages, and SQS takes no per-message delay there. So the
// message is made invisible for after instead (ChangeMessageVisibility):
// it stays at the head of its group, and SQS hands out nothing of that
// group (that user) until it comes back, while every other group goes on.
// Each such park costs a receipt, which the redrive policy counts: once
// the next receipt would pass half of maxReceiveCount (see mayWait), the
// park sends a copy instead, which starts counting afresh and waits out
// after as a held copy (see hold), and the group's messages this Consumer
// received behind it are sent again as copies after it, in order (see
// lanes); so is each message of the group it receives next that was not
// received yet (a receive brings at most ten, fewer when fewer prefetch
// slots are free), until the parked copy comes back (see lanes.rotate).
// The group keeps its order unless another Consumer receives the
// messages left ahead of the copies: those are handed over before the
// parked one, once in maxReceiveCount/2 parks (500 by default). Never to
// the DLQ while pending.
func (d *delivery) Release(ctx context.Context, after time.Duration) error {
	return d.settle(func() (bool, error) {
		after = max(after, 0)
		d.stopExtend() // an extension landing after the park would undo it
		if d.c.cfg.FIFO && d.c.mayWait(d) {
			if err := d.wait(ctx, after); err != nil {
				return false, fmt.Errorf("release message %d: %w", d.msg.ID, err)
			}
			d.inPlace.Store(true)
			return true, nil
		}
		if err := d.replaceLocked(ctx, d.send, d.parkCopy(after)); err != nil {
			return !errors.Is(err, errNotStored), fmt.Errorf("release message %d: %w", d.msg.ID, err)
		}
		d.moved.Store(d.c.cfg.FIFO)
		return true, nil
	})
}

// parkCopy is a copy of d with its retry count and last error, delayed by
// after (a standard queue's DelaySeconds, the rest held); its FIFO
// deduplication id is derived from the original's SQS message id, so
// each park of the notification is a copy of its own.
func (d *delivery) parkCopy(after time.Duration) message {
	cp := copyOf(d.raw, d.msg.RetryCount, lastError(d.raw), 0, d.c.cfg.FIFO, "p"+aws.ToString(d.raw.MessageId))
	if rest := cp.withDelay(after, d.c.cfg.FIFO); rest > 0 {
		cp.attrs[AttrHold] = numberAttr(max(rest.Milliseconds(), 1))
	}
	return cp
}

// wait makes the message invisible for after (at most 12 hours) where it
// is; 0 makes it visible at once.
func (d *delivery) wait(ctx context.Context, after time.Duration) error {
	_, err := d.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(d.send), ReceiptHandle: d.raw.ReceiptHandle,
		VisibilityTimeout: int32(seconds(min(after, maxVisibility-time.Minute))),
	})
	return err
}

// handBack makes the message visible again at once, unchanged: a
// stopping Consumer's hand-back of what it holds, once per stop.
func (d *delivery) handBack(ctx context.Context) error {
	return d.settle(func() (bool, error) {
		if err := d.wait(ctx, 0); err != nil {
			return false, fmt.Errorf("hand back message %d: %w", d.msg.ID, err)
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
	out, err := d.client.SendMessage(ctx, cp.toSend(queueURL))
	if err != nil {
		if isMissingQueue(err) {
			d.c.q.forget()
		}
		return fmt.Errorf("%w: send: %w", errNotStored, err)
	}
	if queueURL == d.send && out.MessageId != nil {
		d.copyID.Store(out.MessageId)
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
