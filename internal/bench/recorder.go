package bench

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// Sender is a channel's sender as the Recorder wraps it (worker.Sender).
type Sender interface {
	Send(ctx context.Context, m notify.Outgoing) error
}

// Publisher is the relay's publisher as the Recorder wraps it
// (relay.Publisher).
type Publisher interface {
	Publish(ctx context.Context, events []notify.Event) ([]int64, error)
}

// Recorder timestamps what the pipeline does: each notification its
// channel's provider accepted (an email the SMTP server took, a webhook the
// receiver answered 2xx), and the events the broker confirmed. The bench wraps herald's
// own sender and publisher with it rather than asking the components, so
// that the numbers come from the edges of the pipeline and the components
// run unchanged. It is safe for concurrent use.
type Recorder struct {
	// inFlight and inFlightMax count the sends in progress, and the most
	// there were at once.
	inFlight, inFlightMax atomic.Int64

	mu sync.Mutex
	// sent maps a notification id (as the API shows it) to the moment its
	// email was accepted the first time.
	sent       map[string]time.Time
	repeats    int
	first      time.Time
	last       time.Time
	published  int64
	firstPub   time.Time
	lastPub    time.Time
	pubBatches int64
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{sent: make(map[string]time.Time)}
}

// Reset forgets everything recorded so far (after a warm-up run).
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = make(map[string]time.Time)
	r.inFlightMax.Store(r.inFlight.Load())
	r.repeats, r.published, r.pubBatches = 0, 0, 0
	r.first, r.last, r.firstPub, r.lastPub = time.Time{}, time.Time{}, time.Time{}, time.Time{}
}

// Sender returns s wrapped so that every notification s delivers is
// recorded, by notification id, at the moment Send returns nil: the
// provider has accepted it (for email: the SMTP server has answered 250 to
// the message's data, so it holds that Message-ID).
func (r *Recorder) Sender(s Sender) Sender { return recordingSender{s: s, r: r} }

// Publisher returns p wrapped so that the events the broker confirmed are
// counted, with the time of the first and last confirm.
func (r *Recorder) Publisher(p Publisher) Publisher { return recordingPublisher{p: p, r: r} }

type recordingSender struct {
	s Sender
	r *Recorder
}

func (rs recordingSender) Send(ctx context.Context, e notify.Outgoing) error {
	n := rs.r.inFlight.Add(1)
	for {
		m := rs.r.inFlightMax.Load()
		if n <= m || rs.r.inFlightMax.CompareAndSwap(m, n) {
			break
		}
	}
	err := rs.s.Send(ctx, e)
	rs.r.inFlight.Add(-1)
	if err != nil {
		return err
	}
	rs.r.sentAt(e.NotificationID, time.Now())
	return nil
}

// Probe forwards the wrapped sender's probe (the worker asks a sender that
// has one whether the mail server is back); a sender without one is up.
func (rs recordingSender) Probe(ctx context.Context) error {
	if p, ok := rs.s.(interface{ Probe(context.Context) error }); ok {
		return p.Probe(ctx)
	}
	return nil
}

// Timeout forwards the wrapped sender's send timeout, which the worker's
// claim lease must outlast; 0 when it has none.
func (rs recordingSender) Timeout() time.Duration {
	if t, ok := rs.s.(interface{ Timeout() time.Duration }); ok {
		return t.Timeout()
	}
	return 0
}

// SendsInFlightMax returns the most sends that were in progress at once
// since the recorder was made or reset.
func (r *Recorder) SendsInFlightMax() int64 { return r.inFlightMax.Load() }

type recordingPublisher struct {
	p Publisher
	r *Recorder
}

func (rp recordingPublisher) Publish(ctx context.Context, events []notify.Event) ([]int64, error) {
	start := time.Now()
	confirmed, err := rp.p.Publish(ctx, events)
	rp.r.publishedAt(start, time.Now(), len(confirmed))
	return confirmed, err
}

func (r *Recorder) sentAt(id string, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.sent[id]; ok {
		r.repeats++
		return
	}
	r.sent[id] = t
	if r.first.IsZero() {
		r.first = t
	}
	r.last = t
}

func (r *Recorder) publishedAt(start, end time.Time, n int) {
	if n == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.firstPub.IsZero() {
		// The relay's span starts when its first batch started publishing,
		// not when it was confirmed: that batch's work counts too.
		r.firstPub = start
	}
	r.lastPub = end
	r.published += int64(n)
	r.pubBatches++
}

// Sent returns the number of distinct notifications whose email was
// accepted so far.
func (r *Recorder) Sent() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sent)
}

// Published returns the number of events the broker confirmed so far.
func (r *Recorder) Published() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.published
}

// sentTime returns when the email of notification id was accepted.
func (r *Recorder) sentTime(id string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.sent[id]
	return t, ok
}

// undelivered returns the ids of ids not delivered yet, in their order.
func (r *Recorder) undelivered(ids []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var left []string
	for _, id := range ids {
		if _, ok := r.sent[id]; !ok {
			left = append(left, id)
		}
	}
	return left
}

// snapshot is what Run reads at the end.
type snapshot struct {
	sent, repeats       int
	firstSent, lastSent time.Time
	published, batches  int64
	firstPub, lastPub   time.Time
}

func (r *Recorder) snapshot() snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return snapshot{
		sent: len(r.sent), repeats: r.repeats, firstSent: r.first, lastSent: r.last,
		published: r.published, batches: r.pubBatches, firstPub: r.firstPub, lastPub: r.lastPub,
	}
}

// NotificationID returns the notification id inside a Message-ID of the
// form <ID@DOMAIN> (notify.MessageID), or the Message-ID unchanged when it
// has another form.
func NotificationID(messageID string) string {
	s := strings.TrimPrefix(messageID, "<")
	if id, _, ok := strings.Cut(s, "@"); ok {
		return id
	}
	return messageID
}
