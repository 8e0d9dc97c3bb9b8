package kafka

import (
	"container/heap"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/transport/consume"
)

// topicPartition names one partition.
type topicPartition struct {
	topic     string
	partition int32
}

// partition is the session's books on one partition it owns: the records
// it took and has not yet committed past, and the keys busy in it.
type partition struct {
	topicPartition
	// entries are the records taken and not yet committed past, in offset
	// order; settled ones stay until every one before them is settled too.
	entries []*entry
	// keys holds, for each key with a record in flight (or handed back
	// and waiting to go out again), the key's records waiting behind it.
	keys map[string][]*entry
	// inflight counts records in a handler (or being forwarded) now.
	inflight int
	// revoking stops handing out its records; gone says the partition is
	// no longer the session's: settling fails, nothing is committed.
	revoking, gone bool
	// next is the offset to commit: one past the last record of the
	// settled prefix; valid when hasNext.
	next      kgo.EpochOffset
	hasNext   bool
	committed int64
}

// entry is one record the session took.
type entry struct {
	rec     *kgo.Record
	p       *partition
	key     string
	settled bool
	// due is when a retry record is to be forwarded, by this process's
	// monotonic clock: when it was read plus its delay. heapIdx is its
	// place in the held heap.
	due     time.Time
	heapIdx int
}

// session is one Consume's state, shared by the poll loop, the handlers,
// the forwarder, the committer and the rebalance callbacks.
type session struct {
	cfg    Config
	topics Topics
	log    *slog.Logger
	cl     *kgo.Client
	hctx   context.Context
	handle notify.Handler

	mu      sync.Mutex
	parts   map[topicPartition]*partition
	ready   []*entry      // records whose key is free, in arrival order
	wake    chan struct{} // a record became ready
	changed chan struct{} // closed (and replaced) when an inflight count drops
	held    heldHeap      // retry records waiting to be due
	heldUp  chan struct{} // the earliest due time changed
	paused  map[string]bool
	closing bool
	// recreated is set when a topic was recreated under the session: its
	// books are of the old topic and must not be committed to the new one.
	recreated bool
	restart   func()

	// commitMu orders commits: the committer's and a revoke's never
	// interleave, so a stale offset is never committed after a newer one.
	commitMu sync.Mutex

	checkTopics chan struct{}

	warnMu sync.Mutex
	warned map[string]time.Time
}

func newSession(cfg Config, t Topics, hctx context.Context, handle notify.Handler) *session {
	return &session{
		cfg: cfg, topics: t, log: cfg.Logger, hctx: hctx, handle: handle,
		parts:       map[topicPartition]*partition{},
		wake:        make(chan struct{}, 1),
		changed:     make(chan struct{}),
		heldUp:      make(chan struct{}, 1),
		paused:      map[string]bool{},
		checkTopics: make(chan struct{}, 1),
		warned:      map[string]time.Time{},
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// ingest takes polled records into the books: a requested record becomes
// ready unless its key is busy (then it waits behind the key), a retry
// record is held until due.
func (s *session) ingest(recs []*kgo.Record) {
	if len(recs) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		tp := topicPartition{r.Topic, r.Partition}
		p := s.parts[tp]
		if p == nil {
			p = &partition{topicPartition: tp, keys: map[string][]*entry{}, committed: -1}
			s.parts[tp] = p
		}
		// A record the session already took (the client re-fetched after
		// resetting its position) is not taken twice.
		if n := len(p.entries); n > 0 && r.Offset <= p.entries[n-1].rec.Offset {
			continue
		}
		if p.hasNext && r.Offset < p.next.Offset {
			continue
		}
		e := &entry{rec: r, p: p}
		p.entries = append(p.entries, e)
		if r.Topic == s.topics.Retry {
			// The hold starts when this process read the copy: a copy
			// that waited in the topic (a lagging or restarted
			// consumer) waits longer, never less.
			e.due = time.Now().Add(holdFor(r, s.cfg.retryDelay))
			heap.Push(&s.held, e)
			signal(s.heldUp)
			continue
		}
		e.key = string(r.Key)
		if r.Key == nil {
			// Records without a key (not herald's) wait for nobody.
			e.key = "\x00" + strconv.FormatInt(r.Offset, 10)
		}
		if q, busy := p.keys[e.key]; busy {
			p.keys[e.key] = append(q, e)
			continue
		}
		p.keys[e.key] = nil
		s.ready = append(s.ready, e)
	}
	signal(s.wake)
	s.adjustPauseLocked()
}

// adjustPauseLocked pauses fetching a topic whose held records reached
// MaxBuffered and resumes it below. The client drops what it buffered for
// a paused topic and fetches it again on resume.
func (s *session) adjustPauseLocked() {
	counts := map[string]int{}
	for _, p := range s.parts {
		counts[p.topic] += len(p.entries)
	}
	for _, topic := range []string{s.topics.Requested, s.topics.Retry} {
		full := counts[topic] >= s.cfg.MaxBuffered
		switch {
		case full && !s.paused[topic]:
			s.cl.PauseFetchTopics(topic)
			s.paused[topic] = true
		case !full && s.paused[topic]:
			s.cl.ResumeFetchTopics(topic)
			s.paused[topic] = false
		}
	}
}

// work runs one handler goroutine until ctx ends.
func (s *session) work(ctx context.Context) {
	for {
		e := s.take(ctx)
		if e == nil {
			return
		}
		s.deliver(e)
	}
}

// take waits for a ready record and counts it in flight; nil when ctx
// ended.
func (s *session) take(ctx context.Context) *entry {
	for {
		if ctx.Err() != nil {
			return nil
		}
		s.mu.Lock()
		for len(s.ready) > 0 {
			e := s.ready[0]
			s.ready[0] = nil
			s.ready = s.ready[1:]
			if e.p.revoking || e.settled {
				continue
			}
			e.p.inflight++
			if len(s.ready) > 0 {
				signal(s.wake)
			}
			s.mu.Unlock()
			return e
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		}
	}
}

// deliver hands one record to the handler (or dead-letters it when it is
// not herald's), then books what became of it.
func (s *session) deliver(e *entry) {
	msg, bad := message(e.rec)
	d := &delivery{s: s, e: e, Delivered: consume.Delivered{Msg: msg}}
	if bad != "" {
		if err := d.DeadLetter(s.hctx, bad); err != nil {
			s.warn("kafka: dead-letter a record that is not herald's", err)
		} else {
			s.log.Warn("kafka: record is not herald's; dead-lettered", "reason", bad,
				"source", source(e.rec))
		}
	} else {
		s.handle(s.hctx, d)
	}
	abandoned := d.Once.Close(errReturned)

	s.mu.Lock()
	defer s.mu.Unlock()
	e.p.inflight--
	close(s.changed)
	s.changed = make(chan struct{})
	if abandoned {
		// The handler returned without settling: the record stays first
		// of its key and goes out again after a pause.
		time.AfterFunc(s.cfg.RedeliverDelay, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if !e.settled && !e.p.revoking {
				s.ready = append(s.ready, e)
				signal(s.wake)
			}
		})
	}
}

// settleLocked books e as done: the committable offset moves past every
// settled record at the head of its partition, and the next record of its
// key becomes ready.
func (s *session) settleLocked(e *entry) error {
	p := e.p
	if p.gone {
		return fmt.Errorf("partition %s/%d is no longer this consumer's; the record is delivered again to its new owner",
			p.topic, p.partition)
	}
	e.settled = true
	for len(p.entries) > 0 && p.entries[0].settled {
		r := p.entries[0].rec
		p.next = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
		p.hasNext = true
		p.entries[0] = nil
		p.entries = p.entries[1:]
	}
	if e.rec.Topic == s.topics.Requested {
		if q := p.keys[e.key]; len(q) > 0 {
			s.ready = append(s.ready, q[0])
			p.keys[e.key] = q[1:]
			signal(s.wake)
		} else {
			delete(p.keys, e.key)
		}
	}
	s.adjustPauseLocked()
	return nil
}

func (s *session) settle(e *entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.settleLocked(e)
}

// requeue hands e out again at once, still first of its key.
func (s *session) requeue(e *entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.p.gone || e.p.revoking {
		return fmt.Errorf("partition %s/%d is being handed to another consumer; the record goes with it",
			e.p.topic, e.p.partition)
	}
	s.ready = append(s.ready, e)
	signal(s.wake)
	return nil
}

// commit commits the settled prefix of the given partitions (all when
// nil), where it moved since the last commit.
func (s *session) commit(ctx context.Context, only []*partition) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.Lock()
	stale := s.recreated
	s.mu.Unlock()
	if stale {
		return nil
	}
	type pending struct {
		p      *partition
		offset int64
	}
	var todo []pending
	offsets := map[string]map[int32]kgo.EpochOffset{}
	s.mu.Lock()
	if only == nil {
		for _, p := range s.parts {
			only = append(only, p)
		}
	}
	for _, p := range only {
		if p.gone || !p.hasNext || p.next.Offset <= p.committed {
			continue
		}
		if offsets[p.topic] == nil {
			offsets[p.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[p.topic][p.partition] = p.next
		todo = append(todo, pending{p, p.next.Offset})
	}
	s.mu.Unlock()
	if len(todo) == 0 {
		return nil
	}
	var cerr error
	s.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					cerr = fmt.Errorf("commit %s/%d: error code %d", t.Topic, p.Partition, p.ErrorCode)
				}
			}
		}
	})
	if cerr != nil {
		return fmt.Errorf("commit offsets: %w", cerr)
	}
	s.mu.Lock()
	for _, t := range todo {
		t.p.committed = max(t.p.committed, t.offset)
	}
	s.mu.Unlock()
	return nil
}

// revoke gives up partitions. A revoke (a rebalance, or leaving the group)
// stops handing out their records, waits for the handlers in flight on
// them to settle (up to ShutdownGrace), commits what they settled (for up
// to finalCommitTimeout) and
// drops the rest, which the next owner reads again from the commit. A loss
// (the group went on without this member) cannot commit: it drops at once.
func (s *session) revoke(ctx context.Context, m map[string][]int32, lost bool) {
	s.mu.Lock()
	var ps []*partition
	for topic, parts := range m {
		for _, n := range parts {
			if p := s.parts[topicPartition{topic, n}]; p != nil {
				p.revoking = true
				ps = append(ps, p)
			}
		}
	}
	closing := s.closing
	s.mu.Unlock()
	if len(ps) == 0 {
		return
	}
	if !lost && !closing {
		deadline := time.NewTimer(s.cfg.ShutdownGrace)
		defer deadline.Stop()
	wait:
		for {
			s.mu.Lock()
			busy := 0
			for _, p := range ps {
				busy += p.inflight
			}
			changed := s.changed
			s.mu.Unlock()
			if busy == 0 {
				break
			}
			select {
			case <-changed:
			case <-deadline.C:
				s.log.Warn("kafka: deliveries still in flight on revoked partitions; their records go to the next owner",
					"in_flight", busy)
				break wait
			}
		}
		cctx, cancel := context.WithTimeout(ctx, finalCommitTimeout)
		err := s.commit(cctx, ps)
		cancel()
		if err != nil {
			s.warn("kafka: commit on revoke failed; the next owner delivers those records again", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range ps {
		p.gone = true
		if s.parts[p.topicPartition] == p {
			delete(s.parts, p.topicPartition)
		}
	}
	s.adjustPauseLocked()
}

// forward republishes retry records to the requested topic as they come
// due, and settles each once the cluster acknowledged its copy.
func (s *session) forward(ctx context.Context) {
	for {
		s.mu.Lock()
		now := time.Now()
		var due []*entry
		for s.held.Len() > 0 && !s.held[0].due.After(now) && len(due) < pollMax {
			e := heap.Pop(&s.held).(*entry)
			if e.p.revoking || e.settled {
				continue
			}
			e.p.inflight++
			due = append(due, e)
		}
		wait := time.Hour
		if s.held.Len() > 0 {
			wait = s.held[0].due.Sub(now)
		}
		s.mu.Unlock()

		if len(due) > 0 {
			s.forwardDue(due)
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.heldUp:
		case <-t.C:
		}
		t.Stop()
	}
}

func (s *session) forwardDue(due []*entry) {
	recs := make([]*kgo.Record, len(due))
	for i, e := range due {
		recs[i] = copyRecord(e.rec, s.topics.Requested, HeaderRetryDelay, HeaderDueAt)
	}
	errs := produceAll(s.hctx, s.cl, s.cfg.ConfirmTimeout, recs)
	s.mu.Lock()
	defer s.mu.Unlock()
	var failed error
	for i, e := range due {
		e.p.inflight--
		if errs[i] == nil {
			_ = s.settleLocked(e) // a partition lost meanwhile: its next owner forwards it again
			continue
		}
		failed = errs[i]
		if !e.p.revoking {
			e.due = time.Now().Add(s.cfg.RedeliverDelay)
			heap.Push(&s.held, e)
		}
	}
	close(s.changed)
	s.changed = make(chan struct{})
	if failed != nil {
		s.log.Warn("kafka: forwarding due retries failed; trying again", "err", failed)
	}
}

// watchTopics recreates the topics when somebody deletes them, every
// TopicCheckInterval and after a failed fetch.
func (s *session) watchTopics(ctx context.Context, adm *kadm.Client) {
	consume.Every(ctx, s.cfg.TopicCheckInterval, s.checkTopics, func() bool {
		created, err := ensureTopics(ctx, adm, s.cfg, s.topics.worker())
		if err != nil && ctx.Err() == nil {
			s.warn("kafka: checking the topics failed", err)
		}
		logRecreated(s.log, created)
		if len(created) > 0 {
			s.topicRecreated()
		}
		return true
	})
}

// topicRecreated ends the session without committing: its offsets belong
// to the deleted topic. What it settled meanwhile is delivered again and
// absorbed by the store.
func (s *session) topicRecreated() {
	s.mu.Lock()
	s.recreated = true
	s.mu.Unlock()
	s.restart()
}

// heldHeap orders retry records by due time.
type heldHeap []*entry

func (h heldHeap) Len() int           { return len(h) }
func (h heldHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h heldHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx, h[j].heapIdx = i, j
}
func (h *heldHeap) Push(x any) {
	e := x.(*entry)
	e.heapIdx = len(*h)
	*h = append(*h, e)
}
func (h *heldHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
