package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// load is the client side: N notifications, each with its own
// Idempotency-Key, from concurrent clients that retry as a careful client
// does.
type load struct {
	base    string
	runID   string
	n       int
	clients int
	// spread is how long the creates are spread over, so that the faults
	// hit the load and not only the drain.
	spread   time.Duration
	deadline time.Time
	client   *http.Client
	// hookURLs are the webhook receiver's endpoints: every
	// webhookEvery-th notification is a webhook to one of them, in turn
	// (none when empty).
	hookURLs []string

	mu       sync.Mutex
	accepted map[int]string // index -> notification id
	refused  map[int]string // index -> last answer, for the ones never accepted

	// answers are every create's answer, in the order they came: what
	// pg-failover reads its figures from.
	answers []answer

	attempts atomic.Int64
	retried  atomic.Int64
	done     atomic.Int64
}

// answer is one create request's outcome.
type answer struct {
	i        int // the notification's index in the load
	sent, at time.Time
	// ok is a 2xx; anything else (an error, a 5xx, a 429) is a refusal
	// the client retries.
	ok bool
}

func newLoad(base, runID string, hookURLs []string, n, clients int, spread time.Duration, deadline time.Time) *load {
	return &load{
		base: base, runID: runID, hookURLs: hookURLs, n: n, clients: clients, spread: spread, deadline: deadline,
		client: &http.Client{
			Timeout:   10 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxIdleConns: clients},
		},
		accepted: make(map[int]string, n),
		refused:  map[int]string{},
	}
}

// key is the Idempotency-Key of notification i.
func (l *load) key(i int) string { return fmt.Sprintf("chaos-%s-%d", l.runID, i) }

// webhookEvery makes every third notification of the load a webhook.
const webhookEvery = 3

// channel is the channel of notification i: a third of the load are
// webhooks to the receiver (when there is one), the rest email.
func (l *load) channel(i int) string {
	if len(l.hookURLs) > 0 && i%webhookEvery == webhookEvery-1 {
		return "webhook"
	}
	return "email"
}

// endpoint is the receiver's endpoint webhook i goes to: the webhooks
// take the endpoints in turn.
func (l *load) endpoint(i int) int { return i / webhookEvery % len(l.hookURLs) }

// body is the create request of notification i.
func (l *load) body(i int) string {
	if l.channel(i) == "webhook" {
		return fmt.Sprintf(`{"user_id":"chaos-u%d","channel":"webhook","to":%q,"body":{"chaos":%q,"i":%d}}`,
			i%97, l.hookURLs[l.endpoint(i)], l.runID, i)
	}
	return fmt.Sprintf(`{"user_id":"chaos-u%d","channel":"email","to":"user%d@example.com","subject":"chaos %s #%d","body":"notification %d of the chaos run %s"}`,
		i%97, i, l.runID, i, i, l.runID)
}

// acceptedCount returns the number of notifications accepted so far.
func (l *load) acceptedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.accepted)
}

// run creates the notifications and returns when each was accepted or
// given up at the deadline.
func (l *load) run(ctx context.Context) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range l.clients {
		wg.Go(func() {
			for i := range next {
				l.create(ctx, i)
				l.done.Add(1)
			}
		})
	}
	start := time.Now()
	for i := range l.n {
		// Pace the releases evenly over the spread; a slow server only
		// makes the load run longer.
		if wait := time.Until(start.Add(l.spread * time.Duration(i) / time.Duration(l.n))); wait > 0 {
			if sleep(ctx, wait) != nil {
				break
			}
		}
		select {
		case next <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
	l.client.CloseIdleConnections()
}

// create posts notification i until a 2xx, retrying with the same key on
// network errors, timeouts, 429 and 5xx, with a capped backoff, until the
// deadline; any other answer is final.
func (l *load) create(ctx context.Context, i int) {
	body := l.body(i)
	backoff := 50 * time.Millisecond
	last := ""
	for attempt := 0; attempt < 10000; attempt++ {
		if ctx.Err() != nil || time.Now().After(l.deadline) {
			break
		}
		l.attempts.Add(1)
		if attempt > 0 {
			l.retried.Add(1)
		}
		sent := time.Now()
		status, id, retryAfter, err := l.post(ctx, body, l.key(i))
		l.answered(i, sent, err == nil && status >= 200 && status < 300)
		switch {
		case err != nil:
			last = err.Error()
		case status >= 200 && status < 300:
			l.mu.Lock()
			l.accepted[i] = id
			l.mu.Unlock()
			return
		case status == http.StatusTooManyRequests || status >= 500:
			last = strconv.Itoa(status)
		default:
			last = fmt.Sprintf("%d (final)", status)
			l.mu.Lock()
			l.refused[i] = last
			l.mu.Unlock()
			return
		}
		wait := backoff
		if retryAfter > 0 {
			wait = retryAfter
		}
		if sleep(ctx, wait) != nil {
			break
		}
		backoff = min(backoff*2, 2*time.Second)
	}
	l.mu.Lock()
	l.refused[i] = "gave up: " + last
	l.mu.Unlock()
}

func (l *load) answered(i int, sent time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.answers = append(l.answers, answer{i: i, sent: sent, at: time.Now(), ok: ok})
}

// firstAcceptedAfter waits up to d for a create sent after t to be
// answered 2xx, and returns when that answer came.
func (l *load) firstAcceptedAfter(ctx context.Context, t time.Time, d time.Duration) (time.Time, error) {
	deadline := time.Now().Add(d)
	for {
		l.mu.Lock()
		for _, a := range l.answers {
			if a.ok && a.sent.After(t) {
				l.mu.Unlock()
				return a.at, nil
			}
		}
		l.mu.Unlock()
		if int(l.done.Load()) == l.n {
			return time.Time{}, errors.New("the load ended first")
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("none within %s", d)
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return time.Time{}, err
		}
	}
}

// refusedBetween counts the answers other than 2xx that came in [from,
// to], and the creates they refused (a client retries one several times).
func (l *load) refusedBetween(from, to time.Time) (answers, creates int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[int]bool{}
	for _, a := range l.answers {
		if !a.ok && !a.at.Before(from) && !a.at.After(to) {
			answers++
			seen[a.i] = true
		}
	}
	return answers, len(seen)
}

func (l *load) post(ctx context.Context, body, key string) (status int, id string, retryAfter time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.base+"/notifications", strings.NewReader(body))
	if err != nil {
		return 0, "", 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := l.client.Do(req)
	if err != nil {
		return 0, "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		// The answer was cut: its outcome is unknown, so ask again.
		return 0, "", 0, fmt.Errorf("read answer: %w", err)
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		retryAfter = time.Duration(min(s, 5)) * time.Second
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		var n struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(b, &n); err != nil || n.ID == "" {
			return 0, "", 0, fmt.Errorf("2xx without an id: %q", b)
		}
		return resp.StatusCode, n.ID, 0, nil
	}
	return resp.StatusCode, "", retryAfter, nil
}
