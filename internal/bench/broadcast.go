package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// MaxBroadcastBatch is the most creates one POST /notifications/batch
// takes (the API's limit).
const MaxBroadcastBatch = 1000

// BroadcastConfig tunes a Broadcast: a bulk send through the batch
// endpoint, with high-priority notifications created one at a time
// alongside it.
type BroadcastConfig struct {
	// URL is the base URL of herald's API. Required.
	URL string
	// N is the number of bulk notifications. Required.
	N int
	// BatchSize is the creates per batch request, at most
	// MaxBroadcastBatch. Default MaxBroadcastBatch.
	BatchSize int
	// Concurrency is the number of clients sending batches at once.
	// Default 4.
	Concurrency int
	// Channel and To are every notification's channel and destination, as
	// in Config.
	Channel, To string
	// HighRate is the rate, per second, of the high-priority creates sent
	// one at a time from the first batch until the last bulk notification
	// is delivered. Default 10.
	HighRate float64
	// Stall bounds how long the drain may go without a single delivery.
	// Default 60s.
	Stall time.Duration
	// Sink, when set, is checked at the end as Config's is.
	Sink func() map[string]int
	// Progress, when set, receives a progress line (a terminal only).
	Progress io.Writer
	// Client sends the requests. Default: a client keeping Concurrency+1
	// connections alive.
	Client *http.Client
}

func (c BroadcastConfig) withDefaults() BroadcastConfig {
	if c.BatchSize == 0 {
		c.BatchSize = MaxBroadcastBatch
	}
	if c.Concurrency == 0 {
		c.Concurrency = 4
	}
	c.Channel, c.To, c.Stall = targetDefaults(c.Channel, c.To, c.Stall)
	if c.HighRate == 0 {
		c.HighRate = 10
	}
	if c.Client == nil {
		c.Client = &http.Client{Transport: &http.Transport{
			MaxIdleConns:        c.Concurrency + 1,
			MaxIdleConnsPerHost: c.Concurrency + 1,
			DisableCompression:  true,
		}}
	}
	return c
}

func (c BroadcastConfig) validate() error {
	if err := checkRequests(c.URL, c.N); err != nil {
		return err
	}
	switch {
	case c.BatchSize < 1 || c.BatchSize > MaxBroadcastBatch:
		return fmt.Errorf("bench: batch size must be 1 to %d, got %d", MaxBroadcastBatch, c.BatchSize)
	case c.Concurrency < 1:
		return fmt.Errorf("bench: concurrency must be at least 1, got %d", c.Concurrency)
	case c.HighRate < 0:
		return fmt.Errorf("bench: high rate must not be negative, got %g", c.HighRate)
	}
	return checkTarget(c.Channel, c.To, c.Stall)
}

// BroadcastResult is what one Broadcast measured.
type BroadcastResult struct {
	// Accepted is the bulk notifications answered 201 inside their
	// batches; Rejected the others, by item status (0: the batch got no
	// 207 at all).
	Accepted int
	Rejected map[int]int
	// Accept runs from the first batch request to the last batch's 207.
	Accept time.Duration
	// Delivered is the bulk notifications the provider accepted; Repeats
	// counts notifications (bulk or high) sent more than once.
	Delivered, Repeats int
	// Drain runs from the last batch's 207 to the last bulk delivery;
	// Elapsed from the first batch request to it.
	Drain, Elapsed time.Duration
	// HighCreated counts every high-priority create answered 201.
	HighCreated int
	// WhileAccepting and WhileDraining are the high-priority creates
	// answered 201 while bulk notifications waited: before the last
	// batch's answer, and after it.
	WhileAccepting, WhileDraining HighPhase
}

// HighPhase is what the high-priority creates of one phase of a
// broadcast saw.
type HighPhase struct {
	// Created counts the creates answered 201 in the phase while bulk
	// notifications waited, Delivered those of them delivered.
	Created, Delivered int
	// P50, P99 and Max are their latency from the 201 to the provider.
	P50, P99, Max time.Duration
	// BacklogMedian is the median, over them, of the notifications
	// accepted and not yet delivered at each one's 201: the queue each
	// was created behind.
	BacklogMedian int
}

// highPhase sums up the high creates of a phase.
func highPhase(rec *Recorder, highs []highSample) HighPhase {
	var (
		p        HighPhase
		e2e      []time.Duration
		backlogs []int
	)
	for _, h := range highs {
		p.Created++
		backlogs = append(backlogs, h.backlog)
		if t, ok := rec.sentTime(h.id); ok {
			p.Delivered++
			e2e = append(e2e, max(t.Sub(h.at), 0))
		}
	}
	sortDurations(e2e)
	p.P50, p.P99, p.Max = Percentile(e2e, 50), Percentile(e2e, 99), Percentile(e2e, 100)
	if len(backlogs) > 0 {
		slices.Sort(backlogs)
		p.BacklogMedian = backlogs[(len(backlogs)-1)/2]
	}
	return p
}

// highSample is one high-priority create: its id, when its 201 came, and
// how many bulk notifications were waiting then.
type highSample struct {
	id      string
	at      time.Time
	backlog int
}

// Broadcast sends cfg.N bulk notifications ("priority":"bulk") through
// POST /notifications/batch in requests of cfg.BatchSize from
// cfg.Concurrency clients, and from the first request until the last of
// them is delivered creates high-priority notifications one at a time at
// cfg.HighRate. It waits until every accepted notification is delivered
// through rec's sender and returns the measurements: how fast the batches
// were accepted, how long the bulk took to drain, and how long a high
// notification waited while the bulk ones were queued.
func Broadcast(ctx context.Context, rec *Recorder, cfg BroadcastConfig) (BroadcastResult, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return BroadcastResult{}, err
	}
	b := &broadcast{cfg: cfg, rec: rec, bulkIDs: make([]string, 0, cfg.N), statuses: map[int]int{}}
	stopProgress := progress(cfg.Progress, cfg.N, &b.accepted, &atomic.Int64{}, rec)
	defer stopProgress()
	bulk := requestFunc(cfg.Channel, cfg.To, "bulk")
	high := requestFunc(cfg.Channel, cfg.To, "high")
	b.start = time.Now()

	// The high-priority creates run until the bulk ones are delivered;
	// one under way when they stop is answered (a create cut off would be
	// neither counted nor known to the server's log as anything but an
	// error).
	stopped := make(chan struct{})
	var stopOnce sync.Once
	stopHigh := func() { stopOnce.Do(func() { close(stopped) }) }
	defer stopHigh()
	var highWG sync.WaitGroup
	if cfg.HighRate > 0 {
		highWG.Go(func() { b.sendHigh(ctx, stopped, high) })
	}
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Go(func() { b.sendBulk(ctx, bulk) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return BroadcastResult{}, fmt.Errorf("bench: interrupted: %w", err)
	}
	res := BroadcastResult{Accepted: len(b.bulkIDs), Rejected: b.statuses, Accept: b.lastBatch.Sub(b.start)}
	if len(b.bulkIDs) == 0 {
		return res, fmt.Errorf("bench: no bulk notification was accepted (answers by status: %v): %w", b.statuses, b.firstErr)
	}

	// The drain: until every bulk notification is delivered; then the
	// high creates stop, and the last of them are waited for too.
	samples := make([]sample, len(b.bulkIDs))
	for i, id := range b.bulkIDs {
		samples[i] = sample{id: id}
	}
	if err := drainIDs(ctx, rec, b.bulkIDs, cfg.Stall); err != nil {
		return res, err
	}
	stopHigh()
	highWG.Wait()
	res.HighCreated = len(b.highs)
	highIDs := make([]string, len(b.highs))
	for i, h := range b.highs {
		highIDs[i] = h.id
		samples = append(samples, sample{id: h.id})
	}
	if err := drainIDs(ctx, rec, highIDs, cfg.Stall); err != nil {
		return res, err
	}
	stopProgress()
	b.measure(&res)
	if b.firstErr != nil {
		return res, b.firstErr
	}
	if cfg.Sink != nil {
		if err := checkSink(cfg.Sink(), samples); err != nil {
			return res, err
		}
	}
	return res, nil
}

// broadcast is one Broadcast under way: what its bulk clients and its
// high-priority sender share.
type broadcast struct {
	cfg      BroadcastConfig
	rec      *Recorder
	start    time.Time    // the first request
	next     atomic.Int64 // index of the next bulk create
	accepted atomic.Int64
	highSent atomic.Int64 // high creates accepted
	// highs are the high creates answered 201, in order; the high sender
	// alone writes them.
	highs     []highSample
	mu        sync.Mutex // guards the rest
	bulkIDs   []string
	statuses  map[int]int
	firstErr  error
	lastBatch time.Time // the last batch's answer
}

// sendHigh creates high-priority notifications one at a time at
// cfg.HighRate until stopped is closed or ctx ends.
func (b *broadcast) sendHigh(ctx context.Context, stopped <-chan struct{}, high func(int) []byte) {
	interval := time.Duration(float64(time.Second) / b.cfg.HighRate)
	url := b.cfg.URL + "/notifications"
	for i := 0; ; i++ {
		if !waitUntil(ctx, stopped, b.start.Add(time.Duration(i)*interval)) {
			return
		}
		id, status, err := create(ctx, b.cfg.Client, url, high(b.cfg.N+i))
		if status != http.StatusCreated {
			if ctx.Err() == nil {
				b.mu.Lock()
				b.statuses[status]++
				if b.firstErr == nil {
					b.firstErr = fmt.Errorf("high-priority create: %w", err)
				}
				b.mu.Unlock()
			}
			continue
		}
		b.highSent.Add(1)
		backlog := int(b.accepted.Load()) + int(b.highSent.Load()) - b.rec.Sent()
		b.highs = append(b.highs, highSample{id: id, at: time.Now(), backlog: max(backlog, 0)})
	}
}

// sendBulk is one bulk client: it posts the next batch of bulk creates
// until there are none left or ctx ends.
func (b *broadcast) sendBulk(ctx context.Context, bulk func(int) []byte) {
	url := b.cfg.URL + "/notifications/batch"
	for ctx.Err() == nil {
		first := int(b.next.Add(int64(b.cfg.BatchSize))) - b.cfg.BatchSize
		if first >= b.cfg.N {
			return
		}
		k := min(b.cfg.BatchSize, b.cfg.N-first)
		ids, st, err := createBatch(ctx, b.cfg.Client, url, bulk, first, k)
		now := time.Now()
		b.mu.Lock()
		b.bulkIDs = append(b.bulkIDs, ids...)
		for s, n := range st {
			b.statuses[s] += n
		}
		if err != nil && b.firstErr == nil && ctx.Err() == nil {
			b.firstErr = err
		}
		if now.After(b.lastBatch) {
			b.lastBatch = now
		}
		b.mu.Unlock()
		b.accepted.Add(int64(len(ids)))
	}
}

// measure fills res with the drained broadcast's deliveries, its drain and
// the high creates of each phase.
func (b *broadcast) measure(res *BroadcastResult) {
	var lastBulk time.Time
	for _, id := range b.bulkIDs {
		if t, ok := b.rec.sentTime(id); ok {
			res.Delivered++
			if t.After(lastBulk) {
				lastBulk = t
			}
		}
	}
	res.Elapsed = lastBulk.Sub(b.start)
	res.Drain = max(lastBulk.Sub(b.lastBatch), 0)
	res.Repeats = b.rec.snapshot().repeats

	// Only the high creates made while bulk notifications waited count:
	// the last few, after the bulk drained, measure an idle stack.
	var accepting, draining []highSample
	for _, h := range b.highs {
		switch {
		case h.backlog == 0 || h.at.After(lastBulk):
		case h.at.After(b.lastBatch):
			draining = append(draining, h)
		default:
			accepting = append(accepting, h)
		}
	}
	res.WhileAccepting, res.WhileDraining = highPhase(b.rec, accepting), highPhase(b.rec, draining)
}

// waitUntil waits until t and reports true, or false when ctx ends or
// stop is closed first (a nil stop: ctx alone).
func waitUntil(ctx context.Context, stop <-chan struct{}, t time.Time) bool {
	timer := time.NewTimer(max(time.Until(t), 0))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	case <-timer.C:
		return true
	}
}

// createBatch posts the k creates from index first in one batch request
// and returns the ids of those answered 201, with the other items'
// statuses counted.
func createBatch(ctx context.Context, c *http.Client, url string, request func(int) []byte, first, k int) ([]string, map[int]int, error) {
	var body bytes.Buffer
	body.WriteString(`{"notifications":[`)
	for j := range k {
		if j > 0 {
			body.WriteByte(',')
		}
		body.Write(request(first + j))
	}
	body.WriteString(`]}`)
	resp, raw, err := postJSON(ctx, c, url, &body, "batch")
	if err != nil {
		return nil, map[int]int{0: k}, err
	}
	if resp.StatusCode != http.StatusMultiStatus {
		return nil, map[int]int{resp.StatusCode: k}, fmt.Errorf("post batch: %s: %s", resp.Status, bytes.TrimSpace(raw))
	}
	var reply struct {
		Results []struct {
			Status int    `json:"status"`
			ID     string `json:"id"`
		} `json:"results"`
	}
	if err := json.Unmarshal(raw, &reply); err != nil || len(reply.Results) != k {
		return nil, map[int]int{0: k}, fmt.Errorf("post batch: want %d results, got %.200q", k, raw)
	}
	ids := make([]string, 0, k)
	other := map[int]int{}
	var firstBad string
	for _, r := range reply.Results {
		if r.Status == http.StatusCreated && r.ID != "" {
			ids = append(ids, r.ID)
			continue
		}
		other[r.Status]++
		if firstBad == "" {
			firstBad = fmt.Sprintf("status %d", r.Status)
		}
	}
	if firstBad != "" {
		return ids, other, fmt.Errorf("post batch: %d of %d items refused, the first with %s: %.300s", k-len(ids), k, firstBad, raw)
	}
	return ids, other, nil
}

// drainIDs waits until every notification of ids has been delivered; it
// fails when the recorder sees no delivery at all for stall. It looks ids
// up only when the recorder has counted enough new deliveries for the ones
// still missing to be among them: a million ids are not scanned per tick.
func drainIDs(ctx context.Context, rec *Recorder, ids []string, stall time.Duration) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	pending := ids
	sent, lastChange := -len(ids), time.Now() // scan at once
	lastSeen := rec.Sent()
	for {
		now := rec.Sent()
		if now != lastSeen {
			lastSeen, lastChange = now, time.Now()
		}
		if now-sent >= len(pending) {
			pending, sent = rec.undelivered(pending), now
			if len(pending) == 0 {
				return nil
			}
		}
		if time.Since(lastChange) > stall {
			return fmt.Errorf("bench: delivery stalled: %d of %d accepted notifications delivered, none in the last %s", len(ids)-len(pending), len(ids), stall)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: interrupted while draining (%d of %d delivered): %w", len(ids)-len(pending), len(ids), ctx.Err())
		case <-tick.C:
		}
	}
}

// BroadcastReport is the outcome of herald bench --broadcast; its JSON
// field names are what --json prints.
type BroadcastReport struct {
	Store       string `json:"store"`
	Transport   string `json:"transport"`
	Channel     string `json:"channel"`
	N           int    `json:"n"`
	BatchSize   int    `json:"batch_size"`
	Concurrency int    `json:"concurrency"`
	Accepted    int    `json:"accepted"`
	Rejected    int    `json:"rejected"`
	Delivered   int    `json:"delivered"`
	Repeats     int    `json:"repeats"`
	// AcceptS and AcceptPerSec: the bulk notifications' acceptance;
	// RawInsertPerSec the store's own multi-row insert of as many rows in
	// groups of BatchSize, no HTTP (0: not measured, see the notes), and
	// AcceptVsRawInsert the ratio.
	AcceptS           float64 `json:"accept_s"`
	AcceptPerSec      float64 `json:"accept_per_s"`
	RawInsertPerSec   float64 `json:"raw_insert_per_s"`
	AcceptVsRawInsert float64 `json:"accept_vs_raw_insert"`
	// DrainS runs from the last batch's answer to the last bulk delivery;
	// DeliveredPerSec is the bulk delivered per second from the first
	// request to it.
	DrainS          float64 `json:"drain_s"`
	DeliveredPerSec float64 `json:"delivered_per_s"`
	// HighRate is the high-priority creates' rate; the high_accept_*
	// fields describe those made while the batches were accepted and bulk
	// notifications waited, the high_drain_* ones those made after the
	// last batch's answer while bulk notifications waited: how many, their
	// latency from the 201 to the provider, and the median number of
	// notifications waiting at each one's 201.
	HighRate                float64  `json:"high_rate_per_s"`
	HighAcceptN             int      `json:"high_accept_n"`
	HighAcceptP50ms         float64  `json:"high_accept_p50_ms"`
	HighAcceptP99ms         float64  `json:"high_accept_p99_ms"`
	HighAcceptMaxms         float64  `json:"high_accept_max_ms"`
	HighAcceptBacklogMedian int      `json:"high_accept_backlog_median"`
	HighDrainN              int      `json:"high_drain_n"`
	HighDrainP50ms          float64  `json:"high_drain_p50_ms"`
	HighDrainP99ms          float64  `json:"high_drain_p99_ms"`
	HighDrainMaxms          float64  `json:"high_drain_max_ms"`
	HighDrainBacklogMedian  int      `json:"high_drain_backlog_median"`
	Notes                   []string `json:"notes,omitempty"`
}

// NewBroadcastReport builds the report of a Broadcast; rawInsert is the
// raw insert ceiling (0: not measured).
func NewBroadcastReport(store, transport string, cfg BroadcastConfig, res BroadcastResult, rawInsert float64) BroadcastReport {
	cfg = cfg.withDefaults()
	a, d := res.WhileAccepting, res.WhileDraining
	r := BroadcastReport{
		Store: store, Transport: transport, Channel: cfg.Channel, N: cfg.N, BatchSize: cfg.BatchSize, Concurrency: cfg.Concurrency,
		Accepted: res.Accepted, Delivered: res.Delivered, Repeats: res.Repeats,
		AcceptS:         round(res.Accept.Seconds(), 3),
		AcceptPerSec:    round(PerSecond(res.Accepted, res.Accept), 1),
		RawInsertPerSec: round(rawInsert, 1),
		DrainS:          round(res.Drain.Seconds(), 3),
		DeliveredPerSec: round(PerSecond(res.Delivered, res.Elapsed), 1),
		HighRate:        max(cfg.HighRate, 0),
		HighAcceptN:     a.Created, HighAcceptP50ms: ms(a.P50), HighAcceptP99ms: ms(a.P99), HighAcceptMaxms: ms(a.Max), HighAcceptBacklogMedian: a.BacklogMedian,
		HighDrainN: d.Created, HighDrainP50ms: ms(d.P50), HighDrainP99ms: ms(d.P99), HighDrainMaxms: ms(d.Max), HighDrainBacklogMedian: d.BacklogMedian,
	}
	for _, n := range res.Rejected {
		r.Rejected += n
	}
	if rawInsert > 0 {
		r.AcceptVsRawInsert = round(r.AcceptPerSec/rawInsert, 3)
	}
	if a.Delivered < a.Created || d.Delivered < d.Created {
		r.Notes = append(r.Notes, "some high-priority notifications were not delivered (see the error)")
	}
	if d.Created == 0 && cfg.HighRate > 0 {
		r.Notes = append(r.Notes, "no high-priority create was made during the drain while bulk notifications waited: raise --high-rate or --n")
	}
	return r
}

// WriteJSON writes the report as one JSON object on one line.
func (r BroadcastReport) WriteJSON(w io.Writer) error { return writeJSONLine(w, "broadcast report", r) }

// WriteText writes the report for people.
func (r BroadcastReport) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "herald bench --broadcast: %s + %s, channel %s, %d bulk notifications in batches of %d from %d clients\n\n",
		r.Store, r.Transport, r.Channel, r.N, r.BatchSize, r.Concurrency)
	fmt.Fprintf(&b, "  accepted   %d in %.1fs = %.0f/s (%d rejected)\n", r.Accepted, r.AcceptS, r.AcceptPerSec, r.Rejected)
	if r.RawInsertPerSec > 0 {
		fmt.Fprintf(&b, "  raw insert %.0f/s (the store's multi-row insert, no HTTP): accepted/raw %.2f\n", r.RawInsertPerSec, r.AcceptVsRawInsert)
	}
	fmt.Fprintf(&b, "  delivered  %d, %.0f/s; drained %.1fs after the last batch; %d sent twice\n", r.Delivered, r.DeliveredPerSec, r.DrainS, r.Repeats)
	fmt.Fprintf(&b, "  high, while batches were accepted: %d created at %g/s (median %d waiting in front): p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
		r.HighAcceptN, r.HighRate, r.HighAcceptBacklogMedian, r.HighAcceptP50ms, r.HighAcceptP99ms, r.HighAcceptMaxms)
	fmt.Fprintf(&b, "  high, during the drain:           %d created at %g/s (median %d waiting in front): p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
		r.HighDrainN, r.HighRate, r.HighDrainBacklogMedian, r.HighDrainP50ms, r.HighDrainP99ms, r.HighDrainMaxms)
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	return writeText(w, "broadcast report", b.String())
}
