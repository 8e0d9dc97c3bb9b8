package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/transport/consume"
)

// Consumer hands the records of the requested topic to a handler, one key
// (user) at a time, and forwards the retry topic's records to the
// requested topic when they are due. It is a member of the consumer group
// Config.Group; running more Consumers (more worker processes) shares the
// partitions among them.
type Consumer struct {
	cfg    Config
	topics Topics
	log    *slog.Logger
}

// NewConsumer returns a Consumer. It does not connect: Consume does.
func NewConsumer(cfg Config) (*Consumer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Consumer{cfg: cfg, topics: cfg.Topics(), log: cfg.Logger}, nil
}

// pollMax is the most records one poll takes.
const pollMax = 500

// Consume calls handle for the deliveries of the requested topic, from up
// to Prefetch goroutines, until ctx ends. Deliveries of one key (one user)
// reach handle one at a time, in offset order; different keys run side by
// side. Offsets are committed only up to the first delivery not yet settled
// (acknowledged, or its retry copy or dead letter acknowledged by the
// cluster), so a crash redelivers, and never skips.
//
// A cluster that cannot be reached at start is retried with backoff;
// outages later are the client's to ride out (it reconnects and finds the
// new partition leaders by itself). When ctx ends Consume stops taking
// records, lets the handlers in flight finish (their context outlives ctx
// by up to ShutdownGrace), commits what they settled, leaves the group and
// returns nil. Records it held unsettled go to whichever member owns their
// partition next. The final commit and the leave are bounded (2s each), so
// Consume returns within about ShutdownGrace + 4s of ctx ending, provided
// the handlers return once their context is cancelled.
func (c *Consumer) Consume(ctx context.Context, handle notify.Handler) error {
	hctx, hcancel := consume.HandlerContext(ctx, c.cfg.ShutdownGrace)
	defer hcancel()

	adm, closeAdm, err := newAdmin(c.cfg)
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	defer closeAdm()
	backoff := consume.Backoff{Min: c.cfg.ReconnectMin, Max: c.cfg.ReconnectMax}
	for {
		_, err := ensureTopics(ctx, adm, c.cfg, c.topics.worker())
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		c.log.Warn("kafka cluster not ready; retrying", "err", err, "backoff", backoff.Current())
		if !backoff.Wait(ctx) {
			return nil
		}
	}

	for {
		recreated := c.session(ctx, hctx, adm, handle)
		if ctx.Err() != nil || !recreated {
			return nil
		}
		// The client never adopts a recreated topic (its records could not
		// be told from the old ones'): a fresh one does.
		c.log.Error("kafka: a topic was deleted and recreated; restarting the consumer on it")
	}
}

// session runs one client until ctx ends (false) or a topic it consumes
// was recreated (true).
func (c *Consumer) session(ctx, hctx context.Context, adm *kadm.Client, handle notify.Handler) bool {
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	s := newSession(c.cfg, c.topics, hctx, handle)
	s.restart = stop
	opts := append(c.cfg.ConnOpts(), c.cfg.producerOpts()...)
	opts = append(opts,
		kgo.ConsumerGroup(c.topics.Group),
		kgo.SessionTimeout(groupSessionTimeout),
		kgo.HeartbeatInterval(groupHeartbeat),
		kgo.ConsumeTopics(c.topics.Requested, c.topics.Retry),
		// A group that never committed starts at the beginning: the relay
		// may have published before the first worker joined.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		// Records polled are in the session's books before a rebalance
		// can revoke their partition, so a revoke sees all of them.
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(func(ctx context.Context, _ *kgo.Client, m map[string][]int32) { s.revoke(ctx, m, false) }),
		kgo.OnPartitionsLost(func(ctx context.Context, _ *kgo.Client, m map[string][]int32) { s.revoke(ctx, m, true) }),
		kgo.FetchMaxWait(time.Second),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		// Only a bad option fails here, and the options are ours.
		c.log.Error("kafka: consumer client", "err", err)
		return false
	}
	s.cl = cl

	var handlers, helpers sync.WaitGroup
	for range c.cfg.Prefetch {
		handlers.Go(func() { s.work(sctx) })
	}
	helpers.Go(func() { s.forward(sctx) })
	helpers.Go(func() { s.commitLoop(sctx) })
	helpers.Go(func() { s.watchTopics(sctx, adm) })

	s.poll(sctx)

	handlers.Wait()
	helpers.Wait()
	s.mu.Lock()
	recreated := s.recreated
	s.mu.Unlock()
	if !recreated {
		// Short: a commit waits out a rebalance in progress, which can
		// take as long as the group's slowest member. What it leaves
		// uncommitted is delivered again and absorbed by the store.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalCommitTimeout)
		defer cancel()
		if err := s.commit(cctx, nil); err != nil {
			c.log.Warn("kafka: final offset commit failed; settled records will be delivered again", "err", err)
		}
	}
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	c.close(cl)
	return recreated
}

// close closes cl, leaving the group, for at most closeTimeout: a leave
// waits for a rebalance in progress to end, and a rebalance waits for every
// member, however slow. Past the timeout the close goes on in the
// background (the process is usually about to exit) and the group hands
// this member's partitions over when its session times out; their
// uncommitted records are delivered again.
func (c *Consumer) close(cl *kgo.Client) {
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		cl.CloseAllowingRebalance()
	}()
	t := time.NewTimer(closeTimeout)
	defer t.Stop()
	select {
	case <-closed:
	case <-t.C:
		c.log.Warn("kafka: leaving the consumer group did not finish in time; the group reassigns this worker's partitions after its session timeout",
			"waited", closeTimeout)
	}
}

// poll feeds the session until ctx ends.
func (s *session) poll(ctx context.Context) {
	for {
		fs := s.cl.PollRecords(ctx, pollMax)
		if ctx.Err() != nil {
			s.cl.AllowRebalance()
			return
		}
		var errs []error
		recreated := false
		fs.EachError(func(topic string, partition int32, err error) {
			errs = append(errs, fmt.Errorf("%s/%d: %w", topic, partition, err))
			// The client reports a topic it holds under another id.
			recreated = recreated || errors.Is(err, kerr.UnknownTopicID)
		})
		recs := fs.Records()
		s.ingest(recs)
		s.cl.AllowRebalance()
		if len(errs) > 0 {
			if recreated {
				s.topicRecreated()
				continue
			}
			s.warn("kafka fetch failed; the client retries", errors.Join(errs...))
			select {
			case s.checkTopics <- struct{}{}:
			default:
			}
			if len(recs) == 0 {
				// Not a busy loop while the cluster keeps failing.
				consume.Sleep(ctx, s.cfg.ReconnectMin)
			}
		}
	}
}

// commitLoop commits settled offsets every CommitInterval until ctx ends.
func (s *session) commitLoop(ctx context.Context) {
	consume.Every(ctx, s.cfg.CommitInterval, nil, func() bool {
		if err := s.commit(ctx, nil); err != nil && ctx.Err() == nil {
			s.warn("kafka offset commit failed; retrying at the next interval", err)
		}
		return true
	})
}

// warn logs err at WARN, at most once per warnEvery for the same message,
// so that an outage does not flood the log.
func (s *session) warn(msg string, err error) {
	s.warnMu.Lock()
	defer s.warnMu.Unlock()
	key := msg + ": " + err.Error()
	if at, ok := s.warned[key]; ok && time.Since(at) < warnEvery {
		return
	}
	if len(s.warned) > 100 {
		clear(s.warned)
	}
	s.warned[key] = time.Now()
	s.log.Warn(msg, "err", err)
}

const warnEvery = 10 * time.Second
