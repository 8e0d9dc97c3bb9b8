package sqs

import (
	"context"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/transport/consume"
)

// lanes hands a FIFO queue's messages to the handler one group at a time:
// a group's messages (one user's) go in the order received, the next only
// once the one before it was settled and gone from the queue, while
// different groups run side by side. One receive may bring several
// messages of a group; SQS keeps the order of what it hands out, and the
// lane keeps it through the handling, within a receive and across them.
type lanes struct {
	c       *Consumer
	stop    context.Context // the Consume context: once it ends, no further message is handed over
	handle  notify.Handler
	acks    chan<- ackReq
	wg      *sync.WaitGroup
	pending *consume.Held[*delivery]
	free    func() // gives one message's prefetch slot back

	mu sync.Mutex
	// queued holds each group's messages not handed over yet, in order; a
	// group has an entry while its lane runs.
	queued map[string][]*delivery
	// moved holds, for a group some of whose messages this Consumer sent
	// to the end of the group as copies (a park that moves, the messages
	// queued behind it), the SQS message ids of those copies: until one of
	// them comes back, a message of the group received here was ahead of
	// them in the queue (a receive brings at most ten, and fewer when
	// fewer prefetch slots were free) and goes behind them too (see
	// rotate). An entry goes when one of its copies is received, or after
	// a visibility timeout (another Consumer received the copies).
	moved map[string]*movedCopies
}

// movedCopies are the copies sent to the end of one group, since.
type movedCopies struct {
	ids   map[string]bool
	since time.Time
}

// groupKey is m's MessageGroupId, or the group herald gives the payload
// when SQS did not say (the same: see groupOf).
func groupKey(m types.Message) string {
	if g := m.Attributes["MessageGroupId"]; g != "" {
		return g
	}
	return groupOf([]byte(aws.ToString(m.Body)))
}

// add queues the messages of one receive behind their groups', in
// order, and starts the lane of each group that is not running. The whole
// receive is queued at once: a lane that hands one of them back with the
// rest of its group (see run) finds every message that came with it.
// ctx is the handlers' context.
func (l *lanes) add(ctx context.Context, msgs []types.Message) {
	ds := make([]*delivery, 0, len(msgs))
	for _, m := range msgs {
		if d := l.c.open(ctx, m, l.acks); d != nil {
			ds = append(ds, d)
			continue
		}
		l.free()
	}
	var start []string
	l.mu.Lock()
	for _, d := range ds {
		g := groupKey(d.raw)
		q, running := l.queued[g]
		if !running {
			start = append(start, g)
		}
		l.queued[g] = append(q, d)
	}
	l.mu.Unlock()
	for _, g := range start {
		l.wg.Go(func() { l.run(ctx, g) })
	}
}

// run hands group g's messages over one after another until none is left.
// When one stays where it is in the queue (parked or held by its
// visibility, left unsettled), the messages queued behind it when it was
// handed over are handed back so that SQS gives them again after it, in
// order. Those are all of the group that SQS had handed out then: it hands
// out nothing more of a group while one of its messages is in flight. What
// a later receive brings (once the message settled, its copy among them
// when it moved) takes its turn here, as any message does.
func (l *lanes) run(ctx context.Context, g string) {
	for {
		l.mu.Lock()
		q := l.queued[g]
		if len(q) == 0 {
			delete(l.queued, g)
			l.mu.Unlock()
			return
		}
		d := q[0]
		l.queued[g] = q[1:]
		behind := len(q) - 1
		l.mu.Unlock()

		if l.stop.Err() != nil {
			l.putBack(g, false, -1, d)
			continue
		}
		if l.ahead(g, d) {
			l.rotate(g, d)
			continue
		}
		left, stays := l.c.run(ctx, d, l.handle)
		l.free()
		if left != nil {
			l.pending.Add(left)
		}
		if d.moved.Load() {
			l.record(g, d)
		}
		if stays {
			l.putBack(g, d.moved.Load(), behind)
		}
	}
}

// ahead reports whether d, a message of group g, was ahead of copies this
// Consumer sent to the end of g (see moved), and forgets those copies when
// d is one of them.
func (l *lanes) ahead(g string, d *delivery) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	mc := l.moved[g]
	if mc == nil {
		return false
	}
	if mc.ids[aws.ToString(d.raw.MessageId)] || time.Since(mc.since) > l.c.cfg.VisibilityTimeout {
		delete(l.moved, g)
		return false
	}
	return true
}

// rotate sends d, which was ahead of copies moved to the end of its group
// g, to the end of g as a copy too, without handing it over: one after
// another, the messages ahead go behind the moved ones in their order,
// until the first moved one comes back, and the group's order is what it
// was with the parked message first.
func (l *lanes) rotate(g string, d *delivery) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l.c.putBack(ctx, []*delivery{d}, true)
	l.record(g, d)
	l.free()
}

// record remembers d's copy, if d was sent to the end of group g as one,
// and forgets the groups whose copies were not seen for a visibility
// timeout.
func (l *lanes) record(g string, ds ...*delivery) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, mc := range l.moved {
		if time.Since(mc.since) > l.c.cfg.VisibilityTimeout {
			delete(l.moved, k)
		}
	}
	for _, d := range ds {
		id := d.copyID.Load()
		if id == nil {
			continue
		}
		mc := l.moved[g]
		if mc == nil {
			mc = &movedCopies{ids: map[string]bool{}}
			l.moved[g] = mc
		}
		mc.ids[*id] = true
		mc.since = time.Now()
	}
}

// putBack hands back first (if any) and the first n messages queued
// behind group g (every one when n is negative), in order, and frees their
// slots; asCopies sends them all as copies (they follow a parked message
// that moved to the end of the group).
func (l *lanes) putBack(g string, asCopies bool, n int, first ...*delivery) {
	l.mu.Lock()
	q := l.queued[g]
	if n < 0 || n > len(q) {
		n = len(q)
	}
	rest := append(first, q[:n]...)
	l.queued[g] = q[n:]
	l.mu.Unlock()
	if len(rest) == 0 {
		return
	}
	// Bounded like any hand-back, tighter when stopping (the stop's bound);
	// what does not reach SQS comes back after its visibility timeout.
	timeout := 30 * time.Second
	if l.stop.Err() != nil {
		timeout = handBackTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	l.c.putBack(ctx, rest, asCopies)
	l.record(g, rest...)
	for range rest {
		l.free()
	}
}

// putBack hands back messages of one group that were received but not
// handed over, in their order. Each becomes visible again where it is,
// except that a copy whose hold was not served yet serves it now (so that
// its next receipt, its second, hands it over after its delay, as hold
// expects), and that a message whose receipts near the redrive policy's
// count (see mayWait) is sent again as a copy instead; once one is, every
// one after it is too, so that they stay in order. copying sends them all
// as copies.
func (c *Consumer) putBack(ctx context.Context, rest []*delivery, copying bool) {
	for _, d := range rest {
		d.stopExtend()
		var err error
		switch {
		case copying || !c.mayWait(d):
			copying = true
			hold := time.Duration(0)
			if receiveCount(d.raw) <= 1 {
				hold = d.hold
			}
			err = d.replace(ctx, d.send, d.parkCopy(hold))
		case d.hold > 0 && receiveCount(d.raw) <= 1:
			err = d.settle(func() (bool, error) {
				err := d.wait(ctx, d.hold)
				return err == nil, err
			})
		default:
			err = d.handBack(ctx)
		}
		if err != nil {
			c.cfg.Logger.Warn("sqs: handing back a message queued behind its group failed; it comes back after its visibility timeout", "message_id", d.msg.ID, "err", err)
		}
	}
}
