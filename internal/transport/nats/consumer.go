package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/transport/consume"
)

// Consumer delivers the messages of notifications.requested to a handler,
// with explicit acknowledgement, and moves due retries back to that
// subject. It reconnects after outages on its own.
type Consumer struct {
	cfg   Config
	topo  Topology
	log   *slog.Logger
	holds *holdBook
}

// NewConsumer returns a Consumer. It does not connect: Consume does.
func NewConsumer(cfg Config) (*Consumer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Consumer{cfg: cfg, topo: cfg.Topology(), log: cfg.Logger, holds: &holdBook{due: map[uint64]time.Time{}}}, nil
}

// Consume calls handle for each delivery, from Prefetch goroutines, until
// ctx ends. A server outage never ends it: the client reconnects on its
// own, and when the connection is lost for good (or the stream or a
// consumer is gone) Consume logs why, backs off, connects again and
// declares what is missing. When ctx ends it stops taking deliveries, lets
// the handlers in flight finish (their context outlives ctx by up to
// ShutdownGrace), hands every delivery it holds unsettled back to the
// stream (a negative acknowledgement: the next consumer gets it at once)
// and returns nil, within ShutdownGrace + 2s: when the connection does not
// answer (a reconnection to a server that accepts TCP and never answers)
// it returns then anyway, leaving what it holds, and handler calls still
// blocked on the connection, to the server's ack wait. It returns an error only when the server holds a stream
// it cannot use (ErrTopologyMismatch).
func (c *Consumer) Consume(ctx context.Context, handle notify.Handler) error {
	hctx, hcancel := consume.HandlerContext(ctx, c.cfg.ShutdownGrace)
	defer hcancel()

	backoff := consume.Backoff{Min: c.cfg.ReconnectMin, Max: c.cfg.ReconnectMax}
	for {
		consumed, err := c.session(ctx, hctx, handle)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrTopologyMismatch) {
			return fmt.Errorf("consume: %w", err)
		}
		if consumed {
			backoff.Reset()
		}
		if errors.Is(err, natsgo.ErrAuthorization) {
			c.log.Error("nats consumer cannot connect: credentials rejected; retrying", "err", err, "backoff", backoff.Current())
		} else {
			c.log.Warn("nats consumer disconnected; reconnecting", "err", err, "backoff", backoff.Current())
		}
		if !backoff.Wait(ctx) {
			return nil
		}
	}
}

// session runs one connection until it is closed for good, the stream or
// a consumer is gone, or ctx ends. consumed reports whether it got as far
// as consuming, which resets the backoff.
func (c *Consumer) session(ctx, hctx context.Context, handle notify.Handler) (consumed bool, err error) {
	sctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	nc, err := c.cfg.connect(ctx, sctx, "consumer", func() { stop(errors.New("connection closed")) })
	if err != nil {
		return false, err
	}
	closeConn := true
	defer func() {
		if closeConn {
			nc.Close()
		}
	}()
	js, err := jetstream.New(nc)
	if err != nil {
		return false, fmt.Errorf("open jetstream: %w", err)
	}
	stream, err := c.topo.declareStream(ctx, js, c.cfg)
	if err != nil {
		return false, err
	}
	workCons, retryCons, err := c.topo.declareConsumers(ctx, stream, c.cfg)
	if err != nil {
		return false, err
	}
	s := &session{cfg: c.cfg, topo: c.topo, log: c.log, js: js, holds: c.holds}
	var bg, handlers sync.WaitGroup
	bg.Go(func() { s.receive(sctx, hctx, workCons, handle, &handlers, stop) })
	bg.Go(func() { s.moveRetries(sctx, retryCons, stop) })
	bg.Go(func() { s.check(sctx, stop, workCons, retryCons) })

	<-sctx.Done()
	closeConn = false
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		bg.Wait()
		handlers.Wait()
		s.handBackHeld()
		// Negative acknowledgements are not answered: flush them out
		// before the connection closes, briefly (what does not reach the
		// server comes back after the ack wait).
		_ = nc.FlushTimeout(flushTimeout)
		nc.Close()
	}()
	if ctx.Err() == nil {
		<-stopped
		return true, context.Cause(sctx)
	}
	// Stopping: the process must be gone within a usual grace period
	// before a SIGKILL. A connection the client is re-establishing holds
	// its lock for the whole handshake (up to its connect timeout, longer
	// than that period when the server accepts TCP and never answers), and
	// every pull, hand-back and close waits on it; past stopMargin what this
	// session still holds is left to the server, which redelivers it after
	// the ack wait.
	t := time.NewTimer(c.cfg.ShutdownGrace + stopMargin)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		c.log.Warn("nats consumer stopped without finishing its hand-back: the connection did not answer; what it held comes back after the ack wait")
	}
	return true, nil
}

// stopMargin is how long, past ShutdownGrace, a stopping session waits for
// its hand-back and the connection's close.
const stopMargin = 2 * time.Second

// session is what the deliveries of one connection share.
type session struct {
	cfg  Config
	topo Topology
	log  *slog.Logger
	js   jetstream.JetStream
	// holds remembers the retry copies this Consumer held back.
	holds *holdBook

	// held are the deliveries whose handler returned without settling
	// them: the server keeps them pending until they are handed back when
	// the session ends (or AckWait passes).
	held consume.Held[jetstream.Msg]
}

// pullWait is how long one pull request of the worker consumer waits for
// messages. Every message a pull brings is either handed to a handler or
// handed back, and a pull ends before the session does, so no message can
// arrive for a session that is no longer there; the price is that a
// shutdown waits for the pull in progress to expire.
const pullWait = time.Second

// receive pulls the worker consumer's messages, as many at a time as there
// are idle handlers, and runs a handler goroutine for each, until ctx ends
// (or pulling fails for good, which ends the session). A message that
// arrives after ctx ended is handed back.
func (s *session) receive(ctx, hctx context.Context, cons jetstream.Consumer, handle notify.Handler,
	handlers *sync.WaitGroup, stop context.CancelCauseFunc) {
	idle := make(chan struct{}, s.cfg.Prefetch)
	for range s.cfg.Prefetch {
		idle <- struct{}{}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-idle:
		}
		n := 1
	more:
		for n < s.cfg.Prefetch {
			select {
			case <-idle:
				n++
			default:
				break more
			}
		}
		batch, err := cons.Fetch(n, jetstream.FetchMaxWait(pullWait))
		got := 0
		if err == nil {
			for m := range batch.Messages() {
				got++
				if ctx.Err() != nil {
					s.handBack(m, "shutting down")
					idle <- struct{}{}
					continue
				}
				handlers.Go(func() {
					defer func() { idle <- struct{}{} }()
					s.dispatch(hctx, m, handle)
				})
			}
			err = batch.Error()
		}
		for range n - got {
			idle <- struct{}{}
		}
		if s.fetchEnds(ctx, err, stop, "pull", s.topo.WorkerConsumer, "pull deliveries") {
			return
		}
	}
}

// fetchEnds reports whether err, the outcome of a fetch (verb) from
// consumer, ends the session: when the consumer is gone, it stops the
// session with that as the cause. An empty or timed-out fetch is no
// failure; any other error is logged as logMsg and waited out for
// ReconnectMin (the client is reconnecting, most likely, and recovers on
// its own).
func (s *session) fetchEnds(ctx context.Context, err error, stop context.CancelCauseFunc, verb, consumer, logMsg string) bool {
	switch {
	case err == nil, errors.Is(err, natsgo.ErrTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(err, jetstream.ErrNoMessages):
	case gone(err):
		stop(fmt.Errorf("%s from consumer %q: %w", verb, consumer, err))
		return true
	default:
		s.log.Debug(logMsg, "err", err)
		consume.Sleep(ctx, s.cfg.ReconnectMin)
	}
	return false
}

// check ends the session when the stream or a consumer is gone: a pull on
// a consumer that no longer exists is not answered, and would wait for
// ever.
func (s *session) check(ctx context.Context, stop context.CancelCauseFunc, cons ...jetstream.Consumer) {
	consume.Every(ctx, s.cfg.CheckInterval, nil, func() bool {
		for _, c := range cons {
			ictx, cancel := context.WithTimeout(ctx, s.cfg.ConfirmTimeout)
			_, err := c.Info(ictx)
			cancel()
			if gone(err) {
				stop(fmt.Errorf("consumer %q is gone (stream deleted?): %w", c.CachedInfo().Name, err))
				return false
			}
		}
		return true
	})
}

// handBack returns a message to the stream for immediate redelivery.
func (s *session) handBack(m jetstream.Msg, why string) {
	if err := m.Nak(); err != nil {
		s.log.Warn("hand back delivery; it comes back after the ack wait", "why", why, "err", err)
	}
}

// handBackHeld hands back every delivery a handler left unsettled.
func (s *session) handBackHeld() {
	for _, m := range s.held.Take() {
		s.handBack(m, "left unsettled by its handler")
	}
}

// dispatch hands one delivery to handle, unless it carries no usable
// message id (it is not herald's): then it dead-letters it itself.
func (s *session) dispatch(ctx context.Context, m jetstream.Msg, handle notify.Handler) {
	h := m.Headers()
	raw := h.Get(HeaderMessageID)
	id, ok := notify.ParseID(raw)
	d := &delivery{s: s, m: m, Delivered: consume.Delivered{Msg: notify.Message{
		ID:          id,
		Type:        h.Get(HeaderType),
		Payload:     m.Data(),
		RetryCount:  retryCount(h),
		OccurredAt:  occurredAt(m),
		PublishedAt: storedAt(m),
		Traceparent: h.Get(HeaderTraceparent),
		Priority:    notify.KnownPriority(h.Get(HeaderPriority)),
	}}}
	if !ok {
		reason := fmt.Sprintf("not a herald message: invalid %s %q", HeaderMessageID, consume.Truncate(raw, 64))
		if err := d.DeadLetter(ctx, reason); err != nil {
			s.log.Warn("dead-letter a message that is not herald's", "subject", m.Subject(), "err", err)
		}
	} else {
		handle(ctx, d)
	}
	if !d.isSettled() {
		s.held.Add(m)
	}
}

// retryPoll is how long one fetch of the retry consumer waits for copies;
// retryBatch how many it takes at most.
const (
	retryPoll  = time.Second
	retryBatch = 256
)

// moveRetries runs the retry scheduler until ctx ends: a copy seen for the
// first time goes back to the server with its delay (the server holds it);
// a due one is published to notifications.requested and then acknowledged.
func (s *session) moveRetries(ctx context.Context, cons jetstream.Consumer, stop context.CancelCauseFunc) {
	for ctx.Err() == nil {
		batch, err := cons.Fetch(retryBatch, jetstream.FetchMaxWait(retryPoll))
		if err == nil {
			for m := range batch.Messages() {
				s.moveRetry(ctx, m)
			}
			err = batch.Error()
		}
		if s.fetchEnds(ctx, err, stop, "fetch", s.topo.RetryConsumer, "fetch retry copies") {
			return
		}
	}
}

// moveRetry moves one retry copy back to notifications.requested when it
// is due. The delay is a duration the server counts: the first delivery of
// a copy is handed back with NakWithDelay(delay), and a later delivery is
// due. No time written by another machine is read, and none of this one's
// is compared with another's (see doc.go for what this costs).
func (s *session) moveRetry(ctx context.Context, m jetstream.Msg) {
	h := m.Headers()
	md, err := m.Metadata()
	if delay := holdFor(h, s.cfg.retryDelay); err == nil && delay > 0 {
		seq := md.Sequence.Stream
		wait, held := s.holds.remaining(seq)
		switch {
		case held && wait > 0:
			// Back before the delay this Consumer asked for (a restart
			// of the server, a lost negative acknowledgement): hold it
			// for the rest, by this process's own clock.
			s.hold(m, wait)
			return
		case !held && md.NumDelivered == 1:
			s.holds.start(seq, delay)
			s.hold(m, delay)
			return
		}
	}
	if ctx.Err() != nil {
		s.handBack(m, "shutting down")
		return
	}
	id := h.Get(HeaderMessageID)
	// The move's Nats-Msg-Id derives from the copy's own, so that two moves
	// of one copy are stored once while moves of different copies of one
	// message with one retry count (a retry, then parks) are all stored.
	var msgID string
	if own := h.Get(natsgo.MsgIdHdr); own != "" {
		msgID = own + ".moved"
	} else if _, ok := notify.ParseID(id); ok {
		msgID = id + "." + strconv.Itoa(retryCount(h))
	} else {
		msgID = "seq." + strconv.FormatUint(streamSeq(m), 10) + ".moved"
	}
	out := copyMsg(m, s.topo.Requested)
	out.Header.Del(HeaderDueAt)
	out.Header.Del(HeaderRetryDelay)
	pctx, cancel := context.WithTimeout(ctx, s.cfg.ConfirmTimeout)
	defer cancel()
	if _, err := s.js.PublishMsg(pctx, out, jetstream.WithMsgID(msgID), jetstream.WithExpectStream(s.topo.Stream)); err != nil {
		s.log.Warn("move a due retry back to the send subject; trying again", "message_id", id, "err", err)
		_ = m.NakWithDelay(s.cfg.ReconnectMax)
		return
	}
	s.holds.forget(streamSeq(m))
	// Should this acknowledgement be lost, the copy is moved again and the
	// stream's duplicate window absorbs it.
	if err := m.DoubleAck(pctx); err != nil {
		s.log.Warn("acknowledge a moved retry copy", "message_id", id, "err", err)
	}
}

// hold hands a retry copy back to the server, to be delivered again after
// wait.
func (s *session) hold(m jetstream.Msg, wait time.Duration) {
	if err := m.NakWithDelay(wait); err != nil {
		s.log.Warn("hold back a retry copy; it comes back after the ack wait", "err", err)
	}
}

// holdFor is how long a retry copy waits: the delay it carries
// (x-retry-delay-ms). A copy written before that header existed carries
// only x-due-at, a time of another machine's clock that is not trusted:
// it waits the schedule's delay for its retry count, counted from now
// (late by at most that delay, never early). A copy with neither is due.
func holdFor(h natsgo.Header, schedule func(retry int) time.Duration) time.Duration {
	if ms, err := strconv.ParseInt(h.Get(HeaderRetryDelay), 10, 64); err == nil {
		return time.Duration(max(0, min(ms, maxHoldMillis))) * time.Millisecond
	}
	if h.Get(HeaderDueAt) != "" {
		return schedule(retryCount(h))
	}
	return 0
}

// maxHoldMillis caps the delay a copy may ask for (a year), so that a
// corrupt header cannot overflow a time.Duration.
const maxHoldMillis = 365 * 24 * 3600 * 1000

// flushTimeout bounds the flush of the hand-backs when a session ends.
const flushTimeout = 2 * time.Second

// holdBook remembers, by stream sequence, until when (by this process's
// monotonic clock) the retry copies this Consumer handed back with a delay
// are held, so that a copy the server delivers again early (it restarted,
// or the negative acknowledgement was lost) is held for the rest rather
// than moved. It outlives reconnections; it cannot outlive the process.
type holdBook struct {
	mu        sync.Mutex
	due       map[uint64]time.Time
	nextPrune int
}

// holdBookPrune is the size from which the book drops what it no longer
// needs.
const holdBookPrune = 4096

func (b *holdBook) start(seq uint64, delay time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	b.due[seq] = now.Add(delay)
	if len(b.due) < max(b.nextPrune, holdBookPrune) {
		return
	}
	// A copy due for longer than a few ack waits was delivered to (and
	// moved by) another worker.
	for k, due := range b.due {
		if now.Sub(due) > 4*retryAckWait {
			delete(b.due, k)
		}
	}
	b.nextPrune = 2 * len(b.due)
}

// remaining returns how long the copy at seq is still to be held, and
// whether this Consumer is holding it at all.
func (b *holdBook) remaining(seq uint64) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	due, ok := b.due[seq]
	if !ok {
		return 0, false
	}
	return time.Until(due), true
}

func (b *holdBook) forget(seq uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.due, seq)
}

// copyMsg returns a copy of m for subject, with herald's headers but none
// of the server's (Nats-*), which belong to the original.
func copyMsg(m jetstream.Msg, subject string) *natsgo.Msg {
	out := natsgo.NewMsg(subject)
	for k, v := range m.Headers() {
		if strings.HasPrefix(k, "Nats-") {
			continue
		}
		out.Header[k] = append([]string(nil), v...)
	}
	out.Data = m.Data()
	return out
}

func streamSeq(m jetstream.Msg) uint64 {
	md, err := m.Metadata()
	if err != nil {
		return 0
	}
	return md.Sequence.Stream
}

// occurredAt reads the event's time from x-occurred-at (microseconds),
// falling back to when the stream stored the message.
func occurredAt(m jetstream.Msg) time.Time {
	if v, err := strconv.ParseInt(m.Headers().Get(HeaderOccurredAt), 10, 64); err == nil && v > 0 {
		return time.UnixMicro(v)
	}
	if md, err := m.Metadata(); err == nil {
		return md.Timestamp
	}
	return time.Time{}
}

// storedAt is when the stream stored this copy of the message; zero when
// the metadata cannot be read.
func storedAt(m jetstream.Msg) time.Time {
	if md, err := m.Metadata(); err == nil {
		return md.Timestamp
	}
	return time.Time{}
}

// retryCount reads x-retry-count; absent or unreadable means 0.
func retryCount(h natsgo.Header) int {
	n, err := strconv.ParseInt(h.Get(HeaderRetryCount), 10, 64)
	if err != nil {
		return 0
	}
	return int(max(0, min(n, 1<<31-1)))
}

// delivery implements notify.Delivery.
type delivery struct {
	s *session
	m jetstream.Msg
	consume.Delivered
}

// Ack settles the message as done, and waits for the server to confirm it.
func (d *delivery) Ack(ctx context.Context) error {
	return d.Settle("ack", func() error { return d.m.DoubleAck(ctx) })
}

// Release hands the message back unchanged (x-retry-count kept) as a copy,
// stored before the original is acknowledged, so that it holds nothing of
// the worker consumer's meanwhile. With after > 0 the copy is parked: it
// goes to notifications.retry with after as its delay, and the retry
// scheduler moves it back to notifications.requested once after has
// passed, as it does a retry. With after <= 0 it goes to the back of
// notifications.requested at once.
//
// A negative acknowledgement would not do. NakWithDelay keeps the message
// pending on the worker consumer until it is due, and the pending
// deliveries of all workers share MaxAckPending: during an outage the
// parked messages would fill it and stop every delivery, the others'
// included. A plain Nak puts the message at the head of the line (the
// server redelivers before it delivers anything new), so a worker handing
// back what it cannot send gets it again at once, ahead of what it can.
// Both count towards the consumer's MaxDeliver too (unlimited here, but a
// limit set by hand would dead-letter nothing and drop the message).
//
// Only when the copy cannot be stored does Release fall back to a negative
// acknowledgement with the delay (the server is struggling; the fallback at
// least never loops), and says so in the log.
func (d *delivery) Release(ctx context.Context, after time.Duration) error {
	return d.Settle("release", func() error {
		var out *natsgo.Msg
		var msgID string
		// The stream sequence of this copy makes the id unique per hand-back
		// (a second park of the message is a new copy with a sequence of
		// its own, and the duplicate window must not drop it), and the same
		// for a repeat of this one (its acknowledgement lost, this copy
		// delivered again and released again): that one is stored once.
		seq := strconv.FormatUint(streamSeq(d.m), 10)
		if after > 0 {
			out = copyMsg(d.m, d.s.topo.Retry)
			out.Header.Del(HeaderDueAt)
			out.Header.Set(HeaderRetryDelay, strconv.FormatInt(ceilMillis(after), 10))
			msgID = d.copyID("park." + seq)
		} else {
			out = copyMsg(d.m, d.s.topo.Requested)
			out.Header.Del(HeaderDueAt)
			out.Header.Del(HeaderRetryDelay)
			msgID = d.copyID("release." + seq)
		}
		err := d.publishThenAck(ctx, out, msgID)
		if err == nil || !errors.Is(err, errNotStored) {
			return err
		}
		if nerr := d.m.NakWithDelay(max(after, 0)); nerr != nil {
			return errors.Join(err, fmt.Errorf("hand back the original: %w", nerr))
		}
		d.s.log.Warn("hand-back copy not stored; handed the original back to the worker consumer, where it waits pending",
			"message_id", d.Msg.ID, "after", after, "err", err)
		return nil
	})
}

// ceilMillis is d in milliseconds, rounded up: a park is never short.
func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Retry publishes a copy with the retry count incremented and its delay
// (the retry schedule's delay for that retry) to notifications.retry, waits
// for the stream to store it, and only then acknowledges the original. If
// the copy is not stored the original stays unsettled.
func (d *delivery) Retry(ctx context.Context, reason string) error {
	return d.Settle("retry", func() error {
		n := d.Msg.RetryCount + 1
		delay := d.s.cfg.retryDelay(n)
		return d.forward(ctx, d.s.topo.Retry, n, reason, &delay, d.copyID("retry."+strconv.Itoa(n)))
	})
}

// DeadLetter publishes a copy with its reason to notifications.dlq, waits
// for the stream to store it, and only then acknowledges the original.
func (d *delivery) DeadLetter(ctx context.Context, reason string) error {
	return d.Settle("dead-letter", func() error {
		return d.forward(ctx, d.s.topo.DeadLetter, d.Msg.RetryCount, reason, nil, d.copyID("dlq"))
	})
}

// copyID is the Nats-Msg-Id of a copy: derived from the outbox id, so that
// the same copy published twice is stored once; from the stream sequence
// for a message that has no id.
func (d *delivery) copyID(what string) string {
	if d.Msg.ID > 0 {
		return notify.FormatID(d.Msg.ID) + "." + what
	}
	return "seq." + strconv.FormatUint(streamSeq(d.m), 10) + "." + what
}

func (d *delivery) isSettled() bool { return d.Once.Settled() }

// forward publishes a copy of the message to subject, with its retry
// delay when delay is not nil, and acknowledges the original once the
// stream stored the copy.
func (d *delivery) forward(ctx context.Context, subject string, retries int, reason string, delay *time.Duration, msgID string) error {
	out := copyMsg(d.m, subject)
	out.Header.Set(HeaderRetryCount, strconv.Itoa(retries))
	out.Header.Set(HeaderLastError, consume.Truncate(reason, consume.MaxReason))
	out.Header.Del(HeaderDueAt)
	out.Header.Del(HeaderRetryDelay)
	if delay != nil {
		out.Header.Set(HeaderRetryDelay, strconv.FormatInt(delay.Milliseconds(), 10))
	}
	return d.publishThenAck(ctx, out, msgID)
}

// errNotStored marks a copy the stream did not confirm: the original is
// still unsettled.
var errNotStored = errors.New("copy not stored, original left unsettled")

// publishThenAck publishes out with msgID as its Nats-Msg-Id and
// acknowledges the original once the stream stored it.
func (d *delivery) publishThenAck(ctx context.Context, out *natsgo.Msg, msgID string) error {
	pctx, cancel := context.WithTimeout(ctx, d.s.cfg.ConfirmTimeout)
	defer cancel()
	if _, err := d.s.js.PublishMsg(pctx, out, jetstream.WithMsgID(msgID), jetstream.WithExpectStream(d.s.topo.Stream)); err != nil {
		return fmt.Errorf("%w: %w", errNotStored, err)
	}
	if err := d.m.DoubleAck(ctx); err != nil {
		return fmt.Errorf("acknowledge original after its copy was stored: %w", err)
	}
	return nil
}
