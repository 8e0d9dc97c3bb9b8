package webhook

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// StatusConfig configures a StatusPublisher.
type StatusConfig struct {
	// URL is HERALD_STATUS_WEBHOOK_URL, the operator's own endpoint that
	// receives every status event. It is trusted: the SSRF guard does not
	// apply to it (an internal address is what one expects here).
	// Required; an absolute http(s) URL without credentials.
	URL string
	// Secret signs the requests, as Config.Secret (HERALD_WEBHOOK_SECRET).
	// Required.
	Secret string
	// Timeout bounds one request, as Config.Timeout. Zero means
	// DefaultTimeout.
	Timeout time.Duration
	// Concurrency is the number of requests in flight at once. Zero means
	// the default, 8; it must not be negative.
	Concurrency int
	// TLSConfig is the base TLS configuration, as Config.TLSConfig.
	TLSConfig *tls.Config
}

// everywhere opens every range the guard would refuse: the status URL is
// the operator's, not a sender's.
var everywhere = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}

// StatusPublisher POSTs status events (notification.sent,
// notification.failed) to one endpoint, signed like the webhook channel's
// requests: webhook-id is "evt_" and the event's outbox id, the same on
// every retry, so that a receiver drops repeats; the body is
// {"type":"notification.sent","data":<the StatusEvent>}. It implements
// relay.Publisher (a 2xx confirms an event, anything else leaves it for the
// relay's next batch) and relay.EventPublisher (each event's failure told
// apart, for relay.Retrier, which retries and dead-letters per event). It
// is safe for concurrent use.
type StatusPublisher struct {
	s           *Sender
	u           *url.URL
	concurrency int
}

// NewStatusPublisher checks cfg and returns a StatusPublisher. It does not
// touch the network.
func NewStatusPublisher(cfg StatusConfig) (*StatusPublisher, error) {
	if cfg.Concurrency < 0 {
		return nil, errors.New("status webhook concurrency must not be negative")
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 8
	}
	if cfg.URL == "" {
		return nil, errors.New("status webhook URL is required")
	}
	u, err := parseURL(cfg.URL, everywhere)
	if err != nil {
		var fe *notify.FieldError
		if errors.As(err, &fe) {
			// The field is the setting here, not a request's "to".
			return nil, fmt.Errorf("status webhook URL %s", fe.Message)
		}
		return nil, fmt.Errorf("status webhook URL: %w", err)
	}
	s, err := New(Config{Secret: cfg.Secret, Allow: everywhere, Timeout: cfg.Timeout, TLSConfig: cfg.TLSConfig})
	if err != nil {
		return nil, fmt.Errorf("status webhook: %w", err)
	}
	return &StatusPublisher{s: s, u: u, concurrency: cfg.Concurrency}, nil
}

// StatusBody is the body a StatusPublisher posts for one status event.
type StatusBody struct {
	// Type is the event type: notification.sent or notification.failed.
	Type string `json:"type"`
	// Data is the event's payload, notify.StatusEvent, as stored.
	Data json.RawMessage `json:"data"`
}

// StatusMessageID is the webhook-id of the status event with outbox id id.
func StatusMessageID(id int64) string { return "evt_" + notify.FormatID(id) }

// errNotTried is the error of an event PublishEach did not try because
// the endpoint was found down (or the caller gave up) first.
var errNotTried = errors.New("not tried")

// Publish POSTs every event, Concurrency at a time, and returns the ids of
// those the endpoint answered 2xx; once the endpoint is down (no
// connection), the events not yet sent are left for the next batch without
// being tried. Its error is never notify.Permanent: whatever the endpoint
// answers, the events are offered again. PublishEach tells each event's
// failure apart, for a caller that retries and dead-letters per event.
func (p *StatusPublisher) Publish(ctx context.Context, events []notify.Event) ([]int64, error) {
	var (
		confirmed []int64
		errs      []error
		notTried  int
	)
	for i, err := range p.PublishEach(ctx, events) {
		switch {
		case err == nil:
			confirmed = append(confirmed, events[i].ID)
		case errors.Is(err, errNotTried):
			notTried++
		default:
			// Flattened: no answer of the endpoint (a 4xx is a
			// webhook's permanent failure) may stop the relay; the
			// event waits for the next batch.
			errs = append(errs, errors.New(err.Error()))
		}
	}
	if len(errs) > 3 {
		errs = append(errs[:3], fmt.Errorf("and %d more failures", len(errs)-3))
	}
	if notTried > 0 {
		errs = append([]error{fmt.Errorf("%d status events not tried", notTried)}, errs...)
	}
	return confirmed, errors.Join(errs...)
}

// PublishEach POSTs every event, Concurrency at a time, and returns one
// error per event, in the order of events: nil when the endpoint answered
// 2xx, otherwise marked as the webhook channel marks it (Send):
// notify.Permanent for a 4xx other than 408 and 429 and for a redirect,
// notify.Throttled for a 429 (or a 503 with Retry-After), which delays
// only that event, notify.SenderDown when nothing reached the endpoint, and
// unmarked for a 5xx, a 408, a timeout or a connection lost during the
// request (this event's failed attempt). Once the endpoint is found down,
// the events not yet sent are not tried: their error is SenderDown too (the
// endpoint's outage, not theirs). So is that of an event not tried because
// ctx ended. It implements relay.EventPublisher.
func (p *StatusPublisher) PublishEach(ctx context.Context, events []notify.Event) []error {
	errs := make([]error, len(events))
	var down atomic.Bool
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(p.concurrency, len(events)) {
		wg.Go(func() {
			for i := range next {
				err := p.post(ctx, events[i])
				if notify.IsSenderDown(err) {
					down.Store(true)
				}
				errs[i] = err
			}
		})
	}
	sent := 0
	for i := range events {
		if down.Load() || ctx.Err() != nil {
			break
		}
		select {
		case next <- i:
			sent++
			continue
		case <-ctx.Done():
		}
		break
	}
	close(next)
	wg.Wait()
	for i := sent; i < len(events); i++ {
		errs[i] = notify.SenderDown(fmt.Errorf("status event %d: %w: the status webhook is down or the batch ended", events[i].ID, errNotTried))
	}
	return errs
}

func (p *StatusPublisher) post(ctx context.Context, e notify.Event) error {
	if !notify.IsStatusEvent(e.Type) {
		// The relay feeding this publisher selects status events only.
		return fmt.Errorf("event %d: %s is not a status event", e.ID, e.Type)
	}
	body, err := json.Marshal(StatusBody{Type: e.Type, Data: e.Payload})
	if err != nil {
		return fmt.Errorf("event %d: encode: %w", e.ID, err)
	}
	if err := p.s.post(ctx, p.u, StatusMessageID(e.ID), string(body)); err != nil {
		return fmt.Errorf("status event %d: %w", e.ID, err)
	}
	return nil
}

// Close closes the kept connections.
func (p *StatusPublisher) Close() error { return p.s.Close() }
