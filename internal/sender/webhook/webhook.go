// Package webhook is the webhook channel: it POSTs a notification's JSON
// body to the URL in its "to", signed the Standard Webhooks way
// (webhook-id, webhook-timestamp, webhook-signature), and refuses
// destinations inside the host's own networks (the SSRF guard).
//
// A Send's error says whose fault a failure was, by the phase it happened
// in. Before the request was handed over (a refused connection, DNS, a
// failed TLS handshake; and a connect or TLS handshake that had not
// completed, or a request not yet written, when the deadline passed,
// whichever deadline fired first: the caller's or Config.Timeout, as a
// black-holed endpoint does): the endpoint is down, notify.SenderDown
// scoped to it with notify.ForDestination, no attempt spent. After: a
// 2xx is sent; 408 and 5xx, no reply in time, or a connection the
// endpoint drops once it is made (it may be refusing this very request)
// are this message's attempt; 429, and 503 with Retry-After, are
// notify.Throttled scoped to the endpoint; every other status (410, other
// 4xx, a 3xx: redirects are not followed) is notify.Permanent, as is a
// destination the guard refuses. A caller that cancels gets a plain
// error: that says nothing about the endpoint.
package webhook

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/handover"
)

// DefaultTimeout is the Timeout of a Config that leaves it zero.
const DefaultTimeout = 10 * time.Second

const (
	// maxReason is how much of a response body an error quotes.
	maxReason = 200
	// maxDrain is how much of a response body is read (and dropped) so
	// that its connection can be reused; a longer body closes it.
	maxDrain = 64 << 10
	// maxRetryAfter caps the wait an endpoint can ask for: it pauses only
	// deliveries to that endpoint, and is asked again after.
	maxRetryAfter = time.Hour
	// idlePerHost is the connections kept open to one endpoint.
	idlePerHost = 32
)

// Config configures a Sender.
type Config struct {
	// Secret is HERALD_WEBHOOK_SECRET: one or more Standard Webhooks
	// secrets (whsec_<base64 key>, a key of at least 24 bytes),
	// comma-separated. Each request is signed with the first only; the
	// others are checked and kept for rotation, on the receiver's side.
	// Required: an unsigned webhook could be forged by anyone.
	Secret string
	// Allow lists ranges (HERALD_WEBHOOK_ALLOW) opened although the SSRF
	// guard refuses them (guardRules: loopback, private, link-local,
	// CGNAT, multicast, unspecified, and the other special-purpose and
	// reserved ranges). Default: none.
	Allow []netip.Prefix
	// Timeout bounds one Send: connect, TLS, request and the reply's
	// headers and body (HERALD_WEBHOOK_TIMEOUT). A Send is always bounded,
	// so zero means DefaultTimeout (10s); it must not be negative.
	Timeout time.Duration
	// TLSConfig is the base TLS configuration (e.g. a private CA's
	// RootCAs). Default: the system roots. InsecureSkipVerify is refused.
	TLSConfig *tls.Config
}

func (c Config) withDefaults() Config {
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	return c
}

func (c Config) validate() error {
	switch {
	case c.Timeout < 0:
		return errors.New("webhook timeout must not be negative")
	case c.TLSConfig != nil && c.TLSConfig.InsecureSkipVerify:
		return errors.New("webhook certificate verification cannot be turned off")
	case strings.TrimSpace(c.Secret) == "":
		return errors.New("webhook secret is required (whsec_<base64>)")
	}
	for _, p := range c.Allow {
		if !p.IsValid() {
			return errors.New("webhook allow list holds an invalid prefix")
		}
	}
	return nil
}

// Sender POSTs webhooks. It is safe for concurrent use.
type Sender struct {
	cfg    Config
	key    []byte // the first secret's key: the one that signs
	client atomic.Pointer[http.Client]
	fresh  func() *http.Client
	now    func() time.Time

	mu sync.Mutex
	// unreached holds the endpoints that gave no connection since the
	// client was made; see noteUnreached.
	unreached map[string]struct{}
}

// maxUnreached is how many endpoints may fail to give a connection before
// the Sender starts a new client. net/http's Transport keeps a queue of
// waiting requests per host, and frees it only when that host gives a
// connection: an endpoint that never does (a dead host, a black hole)
// would keep its queue for the process's life, about 1.4 KiB each, and any
// API client can name new ones. A new client drops that state (and the
// kept connections to healthy endpoints, which are made again).
const maxUnreached = 4096

// New checks cfg and returns a Sender. It does not touch the network.
// Proxy settings in the environment (HTTPS_PROXY, ...) are ignored: a
// proxy would dial the destination itself, out of the guard's sight.
func New(cfg Config) (*Sender, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	keys, err := parseSecrets(cfg.Secret)
	if err != nil {
		return nil, err
	}
	cfg.Allow = append([]netip.Prefix(nil), cfg.Allow...)
	for i, p := range cfg.Allow {
		cfg.Allow[i] = p.Masked()
	}
	s := &Sender{cfg: cfg, key: keys[0], now: time.Now}
	dialer := &net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second, ControlContext: s.control}
	var tlsConfig *tls.Config
	if cfg.TLSConfig != nil {
		tlsConfig = cfg.TLSConfig.Clone()
	}
	s.fresh = func() *http.Client {
		return &http.Client{
			Transport: &http.Transport{
				Proxy:                  nil,
				DialContext:            dialer.DialContext,
				TLSClientConfig:        tlsConfig,
				TLSHandshakeTimeout:    cfg.Timeout,
				ForceAttemptHTTP2:      true,
				MaxIdleConns:           1024,
				MaxIdleConnsPerHost:    idlePerHost,
				IdleConnTimeout:        90 * time.Second,
				MaxResponseHeaderBytes: 64 << 10,
			},
			// No redirect is followed: a 3xx is the endpoint's answer.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	s.client.Store(s.fresh())
	s.unreached = make(map[string]struct{})
	return s, nil
}

// noteUnreached records that key gave no connection, and starts a new
// client once maxUnreached endpoints have (see maxUnreached). Requests
// under way on the old client finish on it.
func (s *Sender) noteUnreached(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unreached[key] = struct{}{}
	if len(s.unreached) < maxUnreached {
		return
	}
	old := s.client.Swap(s.fresh())
	old.CloseIdleConnections()
	s.unreached = make(map[string]struct{})
}

// Timeout is the longest one Send takes: whoever holds a claim across a
// Send must hold it longer.
func (s *Sender) Timeout() time.Duration { return s.cfg.Timeout }

// Validate is ValidateAllowing with the sender's Allow: what this sender
// would refuse is refused at create.
func (s *Sender) Validate(r notify.CreateRequest) error { return ValidateAllowing(r, s.cfg.Allow) }

// Destination is the key m's endpoint is paused under when it is down or
// throttles: DestinationKey(m.To).
func (s *Sender) Destination(m notify.Outgoing) string { return DestinationKey(m.To) }

// DestinationKey is the destination key of a webhook URL: its
// scheme://host:port, the host lower-cased, the port explicit. It is ""
// for a URL that cannot be parsed. The worker pauses an endpoint under
// this key, and the store counts its pending notifications under it.
func DestinationKey(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Hostname() == "" {
		return ""
	}
	return destination(u)
}

// Close closes the kept connections.
func (s *Sender) Close() error {
	s.client.Load().CloseIdleConnections()
	return nil
}

// Send POSTs m's body to m.To. A nil return means the endpoint answered
// 2xx. Otherwise the error is marked as the package doc says.
func (s *Sender) Send(ctx context.Context, m notify.Outgoing) error {
	u, err := parseURL(m.To, s.cfg.Allow)
	if err != nil {
		return notify.Permanent(fmt.Errorf("webhook: %w", err))
	}
	return s.post(ctx, u, messageID(m.NotificationID), m.Body)
}

// post POSTs body to u, signed, with id as its webhook-id, and classifies
// the outcome as Send's doc says.
func (s *Sender) post(ctx context.Context, u *url.URL, id, body string) error {
	key := destination(u)
	fail := func(format string, args ...any) error {
		return fmt.Errorf("webhook to %s: "+format, append([]any{key}, args...)...)
	}
	if err := ctx.Err(); err != nil {
		// The caller gave up before anything was tried.
		return fail("before sending: %w", err)
	}

	var tr handover.Trace
	tctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	tctx = tr.Context(tctx)
	req, err := http.NewRequestWithContext(tctx, http.MethodPost, u.String(), strings.NewReader(body))
	if err != nil {
		return notify.Permanent(fail("build request: %w", err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "herald-webhook")
	req.Header.Set("webhook-id", id)
	ts := s.now().Unix()
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", signature(s.key, id, ts, body))

	resp, err := s.client.Load().Do(req)
	if err != nil && !tr.Connected() {
		s.noteUnreached(key)
	}
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			// Its message quotes the whole URL, whose path may hold a
			// receiver's token: the key names the endpoint instead.
			err = ue.Err
		}
		var refused *RefusedError
		switch {
		case errors.As(err, &refused):
			return notify.Permanent(fail("%w", refused))
		case errors.Is(ctx.Err(), context.Canceled):
			// The caller gave up: that says nothing about the endpoint.
			return fail("the caller gave up: %w (%v)", ctx.Err(), err)
		case tr.Stalled(tctx, err):
			// A deadline passed before the endpoint took the request (the
			// caller's, this timeout, or the dialer's or TLS
			// handshake's): the endpoint is down, not the message.
			return notify.ForDestination(notify.SenderDown(fail("%s before the request was handed over: %w",
				tr.Unfinished(), notify.Quiet("deadline exceeded", deadline(tctx, err)))), key)
		case !tr.Connected():
			// Nothing reached the endpoint: it is down, not the message.
			return notify.ForDestination(notify.SenderDown(fail("cannot connect: %w", err)), key)
		case tctx.Err() != nil:
			return fail("no reply within the deadline (the caller's or the %s timeout), the request sent: %w (%v)", s.cfg.Timeout, tctx.Err(), err)
		default:
			return fail("connection failed during the request (request sent: %t): %w", tr.Wrote(), err)
		}
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, maxReason))
	// Drain a little more so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	return s.classify(resp, head, key, fail)
}

// deadline is err, a failure because a deadline passed, with ctx's error
// in its chain when ctx's deadline is the one that passed.
func deadline(ctx context.Context, err error) error {
	if ctx.Err() == nil {
		return err
	}
	return fmt.Errorf("%w (%v)", ctx.Err(), err)
}

// classify reads the endpoint's answer.
func (s *Sender) classify(resp *http.Response, head []byte, key string, fail func(string, ...any) error) error {
	code := resp.StatusCode
	if code/100 == 2 {
		return nil
	}
	err := fail("status %d%s", code, quote(head))
	switch {
	case code/100 == 3:
		loc := resp.Header.Get("Location")
		if len(loc) > maxReason {
			loc = loc[:maxReason] + "..."
		}
		return notify.Permanent(fail("status %d, a redirect to %q, which webhooks do not follow", code, printable(loc)))
	case code == http.StatusTooManyRequests:
		after, _ := retryAfter(resp.Header.Get("Retry-After"), s.now())
		return notify.ForDestination(notify.Throttled(err, after), key)
	case code == http.StatusServiceUnavailable:
		if after, ok := retryAfter(resp.Header.Get("Retry-After"), s.now()); ok {
			return notify.ForDestination(notify.Throttled(err, after), key)
		}
		return err
	case code == http.StatusRequestTimeout, code/100 == 5:
		return err
	case code/100 == 4:
		return notify.Permanent(err)
	}
	return err
}

// retryAfter parses a Retry-After header: delay-seconds or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		d = time.Duration(min(n, int64(maxRetryAfter/time.Second))) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = max(t.Sub(now), 0)
	} else {
		return 0, false
	}
	return min(d, maxRetryAfter), true
}

// quote renders the start of a response body for an error: ": <text>".
func quote(b []byte) string {
	s := strings.TrimSpace(printable(string(b)))
	if s == "" {
		return ""
	}
	if len(b) >= maxReason {
		s += "..."
	}
	return ": " + s
}

// printable replaces control characters and invalid UTF-8 in s.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r == unicode.ReplacementChar || unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, " "))
}
