// Package bench loads a running herald stack over its HTTP API and measures
// it: how fast the API accepts creates, how long a notification takes from
// its 201 to its provider (the SMTP server, the webhook receiver, the Bot
// API), how fast the relay and the workers keep up, and how these compare
// with the raw ceilings of the database, the broker and the provider.
//
// The package knows no concrete store, transport or sender: herald bench
// (cmd/herald) builds the stack, wraps its sender and publisher with a
// Recorder, and hands Run the API's URL. The raw ceilings are measured by
// the funcs it is given (see Ceiling and the raw package).
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Config tunes a Run.
type Config struct {
	// URL is the base URL of herald's API, e.g. http://127.0.0.1:8080.
	// Required.
	URL string
	// N is the number of creates to send. Default 20000.
	N int
	// Concurrency is the number of HTTP clients sending at once. Default 16.
	Concurrency int
	// Channel is the channel every create asks for: ChannelEmail,
	// ChannelWebhook or ChannelTelegram. Default ChannelEmail.
	Channel string
	// To is every create's destination: an address for email, the
	// receiver's URL for webhook, a chat id for telegram. Default
	// bench@example.com for email; required for the others.
	To string
	// Rate, when positive, sends creates at this fixed arrival rate (per
	// second, open loop) instead of as fast as the clients can (closed
	// loop): the latencies then describe a stack that is not saturated.
	// API latency is measured from each create's scheduled start, so that a
	// stack falling behind shows in it. Default 0 (closed loop).
	Rate float64
	// Stall bounds how long the drain may go without a single delivery
	// before Run gives up. Default 60s.
	Stall time.Duration
	// Sink, when set, returns how many messages the channel's server (the
	// SMTP sink, the webhook receiver) holds per notification, keyed by
	// notification id or by a Message-ID of the form <ID@DOMAIN>; Run
	// checks at the end that every accepted notification is there.
	// Default nil (no check).
	Sink func() map[string]int
	// Progress, when set, receives a one-line progress display redrawn in
	// place; give it a terminal only. Default nil (no display).
	Progress io.Writer
	// Client sends the creates. Default: a client keeping Concurrency
	// connections alive.
	Client *http.Client
}

func (c Config) withDefaults() Config {
	if c.N == 0 {
		c.N = 20000
	}
	if c.Concurrency == 0 {
		c.Concurrency = 16
	}
	c.Channel, c.To, c.Stall = targetDefaults(c.Channel, c.To, c.Stall)
	if c.Client == nil {
		c.Client = &http.Client{Transport: &http.Transport{
			MaxIdleConns:        c.Concurrency,
			MaxIdleConnsPerHost: c.Concurrency,
			MaxConnsPerHost:     c.Concurrency,
			DisableCompression:  true,
		}}
	}
	return c
}

func (c Config) validate() error {
	if err := checkRequests(c.URL, c.N); err != nil {
		return err
	}
	switch {
	case c.Concurrency < 1:
		return fmt.Errorf("bench: concurrency must be at least 1, got %d", c.Concurrency)
	case c.Rate < 0:
		return fmt.Errorf("bench: rate must not be negative, got %g", c.Rate)
	}
	return checkTarget(c.Channel, c.To, c.Stall)
}

// Result is what one Run measured.
type Result struct {
	// Accepted is the number of creates answered 201.
	Accepted int
	// Rejected counts the other answers by HTTP status (0: no answer).
	Rejected map[int]int
	// Delivered is the number of accepted notifications the channel's
	// provider accepted (the sender returned nil); Repeats counts
	// notifications sent more than once.
	Delivered, Repeats int
	// APIPerSec is accepted creates per second, from the first request to
	// the last 201.
	APIPerSec float64
	// APIP50 and APIP99 are latencies of the accepted creates.
	APIP50, APIP99 time.Duration
	// E2EP50, E2EP99 and E2EMax run from the client's 201 to the moment the
	// provider accepted that notification (the SMTP server's 250 to its
	// data, the webhook receiver's 2xx).
	E2EP50, E2EP99, E2EMax time.Duration
	// Published is the number of events the broker confirmed (0 without a
	// relay), and RelayPerSec their rate from the start of the relay's first
	// batch to the confirm of its last.
	Published   int64
	RelayPerSec float64
	// RelayBatches is the number of non-empty relay batches.
	RelayBatches int64
	// DeliveredPerSec is delivered notifications per second, from the
	// first request to the last delivery.
	DeliveredPerSec float64
	// Drain runs from the last 201 to the last delivery.
	Drain time.Duration
	// Elapsed runs from the first request to the last delivery.
	Elapsed time.Duration
	// Window, with a Rate, is the arrival window: from the first create's
	// scheduled start to N/Rate later. AcceptedInWindow and
	// DeliveredInWindow count the notifications accepted, and delivered,
	// by its end. All zero without a Rate.
	Window                              time.Duration
	AcceptedInWindow, DeliveredInWindow int
}

// sample is one accepted create as a client saw it.
type sample struct {
	id      string
	latency time.Duration
	at      time.Time // when the 201 arrived
}

// Run sends cfg.N creates to the API, waits until every accepted one has
// been delivered through rec's sender, and returns the measurements. It
// fails when no create was accepted, when the delivery stalls for
// cfg.Stall, or when the sink misses an email.
func Run(ctx context.Context, rec *Recorder, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	l := &load{cfg: cfg, samples: make([]sample, 0, cfg.N), statuses: map[int]int{}}
	stopProgress := progress(cfg.Progress, cfg.N, &l.accepted, &l.rejected, rec)
	defer stopProgress()
	l.send(ctx)
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("bench: interrupted: %w", err)
	}
	samples := l.samples
	res := Result{Accepted: len(samples), Rejected: l.statuses}
	if len(samples) == 0 {
		return res, fmt.Errorf("bench: no create was accepted (answers by status: %v): %w", l.statuses, l.firstErr)
	}
	lastAccept := slices.MaxFunc(samples, func(a, b sample) int { return a.at.Compare(b.at) }).at

	if err := drain(ctx, rec, samples, cfg.Stall); err != nil {
		return res, err
	}
	stopProgress()
	l.measure(&res, rec, lastAccept)
	if cfg.Sink != nil {
		if err := checkSink(cfg.Sink(), samples); err != nil {
			return res, err
		}
	}
	return res, nil
}

// load is the sending side of a Run: its clients, and what they share.
type load struct {
	cfg Config
	// start is when the clients started; interval, with a Rate, is the
	// time between two creates' scheduled starts (0 without).
	start    time.Time
	interval time.Duration
	next     atomic.Int64 // index of the next create to send
	accepted atomic.Int64
	rejected atomic.Int64
	mu       sync.Mutex // guards the rest
	samples  []sample
	statuses map[int]int
	firstErr error
}

// send runs cfg.Concurrency clients until cfg.N creates are sent or ctx
// ends.
func (l *load) send(ctx context.Context) {
	url := l.cfg.URL + "/notifications"
	request := requestFunc(l.cfg.Channel, l.cfg.To, "")
	l.start = time.Now()
	if l.cfg.Rate > 0 {
		l.interval = time.Duration(float64(time.Second) / l.cfg.Rate)
	}
	var wg sync.WaitGroup
	for range l.cfg.Concurrency {
		wg.Go(func() { l.client(ctx, url, request) })
	}
	wg.Wait()
}

// client sends creates, the next index each time, until there are none
// left or ctx ends; with a Rate each waits for its scheduled start.
func (l *load) client(ctx context.Context, url string, request func(int) []byte) {
	var mine []sample
	defer func() {
		l.mu.Lock()
		l.samples = append(l.samples, mine...)
		l.mu.Unlock()
	}()
	for ctx.Err() == nil {
		i := int(l.next.Add(1)) - 1
		if i >= l.cfg.N {
			return
		}
		began := time.Now()
		if l.interval > 0 {
			began = l.start.Add(time.Duration(i) * l.interval)
			if !waitUntil(ctx, nil, began) {
				return
			}
		}
		id, status, err := create(ctx, l.cfg.Client, url, request(i))
		now := time.Now()
		if status == http.StatusCreated {
			l.accepted.Add(1)
			mine = append(mine, sample{id: id, latency: now.Sub(began), at: now})
			continue
		}
		l.rejected.Add(1)
		l.mu.Lock()
		l.statuses[status]++
		if l.firstErr == nil && err != nil && ctx.Err() == nil {
			l.firstErr = err
		}
		l.mu.Unlock()
	}
}

// measure fills res with the drained run's latencies and rates, from the
// samples and what rec recorded.
func (l *load) measure(res *Result, rec *Recorder, lastAccept time.Time) {
	samples, start := l.samples, l.start
	snap := rec.snapshot()
	lat := make([]time.Duration, len(samples))
	e2e := make([]time.Duration, 0, len(samples))
	for i, s := range samples {
		lat[i] = s.latency
		if t, ok := rec.sentTime(s.id); ok {
			// The worker can send before the client has read its 201
			// (the reply and the relay's wake-up race): that is 0, not
			// a negative latency.
			e2e = append(e2e, max(t.Sub(s.at), 0))
		}
	}
	sortDurations(lat)
	sortDurations(e2e)
	res.APIP50, res.APIP99 = Percentile(lat, 50), Percentile(lat, 99)
	res.E2EP50, res.E2EP99, res.E2EMax = Percentile(e2e, 50), Percentile(e2e, 99), Percentile(e2e, 100)
	res.APIPerSec = PerSecond(len(samples), lastAccept.Sub(start))
	res.Delivered, res.Repeats = len(e2e), snap.repeats
	res.Elapsed = snap.lastSent.Sub(start)
	res.DeliveredPerSec = PerSecond(res.Delivered, res.Elapsed)
	res.Drain = max(snap.lastSent.Sub(lastAccept), 0)
	res.Published, res.RelayBatches = snap.published, snap.batches
	if l.interval > 0 {
		res.Window = time.Duration(l.cfg.N) * l.interval
		end := start.Add(res.Window)
		for _, s := range samples {
			if !s.at.After(end) {
				res.AcceptedInWindow++
			}
			if t, ok := rec.sentTime(s.id); ok && !t.After(end) {
				res.DeliveredInWindow++
			}
		}
	}
	if snap.published > 0 {
		res.RelayPerSec = PerSecond(int(snap.published), snap.lastPub.Sub(snap.firstPub))
	}
}

// create posts one create request and returns the notification's id and
// the status.
func create(ctx context.Context, c *http.Client, url string, body []byte) (string, int, error) {
	resp, raw, err := postJSON(ctx, c, url, bytes.NewReader(body), "notification")
	if err != nil {
		return "", 0, err
	}
	if resp.StatusCode != http.StatusCreated {
		return "", resp.StatusCode, fmt.Errorf("post notification: %s: %s", resp.Status, bytes.TrimSpace(raw))
	}
	var v struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(raw, &v); err != nil || v.ID == "" {
		return "", 0, fmt.Errorf("post notification: 201 without an id: %q", raw)
	}
	return v.ID, resp.StatusCode, nil
}

// postJSON posts body to url as JSON and returns the answer with its body
// read; what names the request in the errors.
func postJSON(ctx context.Context, c *http.Client, url string, body io.Reader, what string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
	if err != nil {
		return nil, nil, fmt.Errorf("build %s request: %w", what, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("post %s: %w", what, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s reply: %w", what, err)
	}
	return resp, raw, nil
}

// drain waits until every accepted create has been delivered; it fails when
// no delivery happens for stall.
func drain(ctx context.Context, rec *Recorder, samples []sample, stall time.Duration) error {
	want := len(samples)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	last, lastChange := rec.Sent(), time.Now()
	for last < want {
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: interrupted while draining (%d of %d delivered): %w", last, want, ctx.Err())
		case <-tick.C:
		}
		if n := rec.Sent(); n != last {
			last, lastChange = n, time.Now()
		} else if time.Since(lastChange) > stall {
			return fmt.Errorf("bench: delivery stalled: %d of %d accepted notifications delivered, none in the last %s", last, want, stall)
		}
	}
	return nil
}

// checkSink makes sure the channel's server holds every accepted
// notification: the sender's word alone is not a delivery.
func checkSink(received map[string]int, samples []sample) error {
	byID := make(map[string]int, len(received))
	for mid, n := range received {
		byID[NotificationID(mid)] += n
	}
	missing := 0
	for _, s := range samples {
		if byID[s.id] == 0 {
			missing++
		}
	}
	if missing > 0 {
		return fmt.Errorf("bench: the sink misses %d of %d accepted notifications", missing, len(samples))
	}
	return nil
}

// progress redraws a status line on w every 250ms until the returned func is
// called (more than once is fine). A nil w shows nothing.
func progress(w io.Writer, n int, accepted, rejected *atomic.Int64, rec *Recorder) func() {
	if w == nil {
		return func() {}
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(w, "\r\033[K")
				return
			case <-t.C:
			}
			line := fmt.Sprintf("\r\033[Kbench: created %d/%d", accepted.Load(), n)
			if r := rejected.Load(); r > 0 {
				line += fmt.Sprintf(" (%d rejected)", r)
			}
			if p := rec.Published(); p > 0 {
				line += fmt.Sprintf("  relayed %d", p)
			}
			line += fmt.Sprintf("  sent %d", rec.Sent())
			fmt.Fprint(w, line)
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			<-stopped
		})
	}
}

// Percentile returns the p-th percentile (nearest rank, 0 < p <= 100) of
// sorted durations; 0 for none.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(float64(len(sorted))*p/100)) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

// PerSecond returns n per d, 0 for an empty span.
func PerSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func sortDurations(d []time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
}
