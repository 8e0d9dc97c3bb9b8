package pipelinetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/mail"
	smtpsender "github.com/heraldhq/herald/internal/sender/smtp"
	"github.com/heraldhq/herald/internal/sender/webhook"
	"github.com/heraldhq/herald/internal/testkit/sendertest"
	"github.com/heraldhq/herald/internal/testkit/smtptest"
	"github.com/heraldhq/herald/internal/testkit/webhooktest"
	"github.com/heraldhq/herald/internal/worker"
)

// The isolation subtests (docs/design.md, Isolation; issue 32) measure the
// others: the healthy traffic's delivered/s while one channel, one
// endpoint or one limit misbehaves, against the same traffic's delivered/s
// without the fault, measured by the same worker in the same test. The
// healthy traffic is webhooks to endpoints that take hookLatency to answer,
// so that the worker's send slots, not the machine's speed, bound its
// rate: a fault that holds slots (or window places, or leases) shows as a
// lower rate, whatever the load of the machine.

// FaultEnv names the environment variable that sets how long each fault
// of the isolation subtests lasts (a Go duration: "2m"); the healthy
// traffic flows throughout. Default defaultFault.
const FaultEnv = "HERALD_ISOLATION_OUTAGE"

// defaultFault is the fault's length under make test.
const defaultFault = 6 * time.Second

// Settings of the isolation subtests' worker and traffic.
const (
	// isoSends is the worker's send slots (HERALD_PREFETCH); its source
	// hands it worker.Window(isoSends) deliveries at once, as herald's.
	isoSends = 16
	// isoShare is each webhook endpoint's share of the sends
	// (DestinationConcurrency): a quarter of the slots, as herald's
	// defaults (8 of 32).
	isoShare = 4
	// hookLatency is how long a healthy endpoint takes to answer.
	hookLatency = 200 * time.Millisecond
	// hookTimeout bounds one webhook send (the sender's Timeout and the
	// channel's SendTimeout).
	hookTimeout = 2 * time.Second
	// hookEndpoints is the number of healthy endpoints where one fault
	// concerns a channel (outage, rate): enough that their shares
	// (hookEndpoints x isoShare) exceed the send slots.
	hookEndpoints = 8
	// batch is the webhooks created at once for one measurement: at most
	// isoSends/hookLatency (80/s) go, so a batch takes 4 s or more.
	batch = 320
	// minRatio is the criterion: the others' delivered/s during a
	// fault at least this share of theirs without it. It is required at
	// the size (FaultEnv set: make test-isolation, make
	// test-long), on a machine given to the run.
	minRatio = 0.9
	// stallRatio is what make test requires: there the package shares two
	// cores with the rest of the suite, whose bursts move a 5-second rate
	// by 10-15% (0.87x seen with nothing wrong). It still catches the
	// fault the test is for, one stream for all (the others wait behind
	// the faulty destination: a fraction of their rate); that the faulty
	// destination is paused, holding no send slot, each subtest checks
	// apart, by the attempts it spent. The rate is logged either way.
	stallRatio = 0.5
	// isoBackoffMax caps the pause between probes of a down provider, so
	// that the mail server is found back within it after any outage.
	isoBackoffMax = 10 * time.Second
	// flowWait bounds how long one batch may take to be delivered: a hang
	// guard, not a measure of speed.
	flowWait = 90 * time.Second
)

// faultLength is how long each fault lasts: FaultEnv, or defaultFault.
func faultLength(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv(FaultEnv)
	if v == "" {
		return defaultFault
	}
	d, err := time.ParseDuration(v)
	require.NoError(t, err, "%s", FaultEnv)
	require.Positive(t, d, "%s", FaultEnv)
	return d
}

// RunIsolation runs the isolation subtests, one after another (each
// measures rates, which neighbours on the same cores would disturb), each
// on a harness of its own. A transport's test calls it as it calls Run.
// Each fault lasts FaultEnv (default 6s); the test takes about four times
// that plus a minute.
//
// At the size (FaultEnv set), where the rates are held to
// minRatio, the test runs alone in its package. Under make test, where
// they are held to stallRatio only, it runs in parallel with the
// package's other parallel tests (the isolation tests of the other
// stores among them): one after another they took three of the table
// package's four minutes.
func RunIsolation(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Helper()
	if os.Getenv(FaultEnv) == "" {
		t.Parallel()
	}
	fault := faultLength(t)
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, e *env, fault time.Duration)
	}{
		{"SMTPOutage", testSMTPOutage},
		{"BlackHoledEndpoint", testBlackHoledEndpoint},
		{"EmailRate", testEmailRate},
		{"ParkedPastLease", testParkedPastLease},
		{"FairShare", testFairShare},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			require.NotNil(t, h.Store, "Harness.Store")
			require.NotNil(t, h.NewSource, "Harness.NewSource")
			require.NotNil(t, h.Pump, "Harness.Pump")
			ctx, cancel := context.WithTimeout(t.Context(), 3*fault+3*flowWait)
			t.Cleanup(cancel)
			tc.fn(t, &env{h: h, ctx: ctx, smtp: smtptest.Start(t)}, fault)
		})
	}
}

// hub is the healthy webhook endpoints (and any scripted one): each
// request is checked against the signing key and counted by the key its
// body carries ({"k": "..."}), with the time of its first arrival.
type hub struct {
	t   *testing.T
	key []byte
	// answer, when set, scripts the status (and headers) of an endpoint's
	// nth request (from 1) for a body key; nil: 204 after hookLatency.
	answer func(k string, n int, h http.Header) int

	mu      sync.Mutex
	got     map[string]int
	first   map[string]time.Time
	refused int // requests that failed the signature check
}

func newHub(t *testing.T) (*hub, string) {
	secret, key := webhooktest.NewSecret()
	return &hub{t: t, key: key, got: map[string]int{}, first: map[string]time.Time{}}, secret
}

// endpoint starts one endpoint of the hub and returns its URL.
func (h *hub) endpoint() string {
	srv := httptest.NewServer(http.HandlerFunc(h.serve))
	h.t.Cleanup(srv.Close)
	return srv.URL + "/hook"
}

func (h *hub) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	if err := webhooktest.Verify(h.key, r.Header, body, time.Now()); err != nil {
		h.mu.Lock()
		h.refused++
		h.mu.Unlock()
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	var p struct {
		K string `json:"k"`
	}
	if err := json.Unmarshal(body, &p); err != nil || p.K == "" {
		h.mu.Lock()
		h.refused++
		h.mu.Unlock()
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	// The endpoint's own latency: the peer's behaviour, not a wait for
	// anything of the test's.
	t := time.NewTimer(hookLatency)
	select {
	case <-t.C:
	case <-r.Context().Done():
		t.Stop()
		return
	}
	h.mu.Lock()
	h.got[p.K]++
	n := h.got[p.K]
	if n == 1 {
		h.first[p.K] = time.Now()
	}
	h.mu.Unlock()
	status := http.StatusNoContent
	if h.answer != nil {
		status = h.answer(p.K, n, w.Header())
	}
	w.WriteHeader(status)
}

// delivered reports how many of keys arrived at least once, and when the
// last of them first arrived.
func (h *hub) delivered(keys []string) (int, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var n int
	var last time.Time
	for _, k := range keys {
		if at, ok := h.first[k]; ok {
			n++
			if at.After(last) {
				last = at
			}
		}
	}
	return n, last
}

// requests returns how many requests carried k.
func (h *hub) requests(k string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.got[k]
}

// isoWorker is a worker with an email and a webhook channel.
type isoWorker struct {
	*runningWorker
	w *worker.Worker
}

// isoOptions vary the isolation worker.
type isoOptions struct {
	// emailRate is the email channel's Rate (0: none).
	emailRate float64
	// lease is the source's Lease (0: the suite's).
	lease time.Duration
}

// startIsoWorker runs a real worker on a fresh source with two channels:
// email through the real SMTP sender to smtpURL, and webhook through the
// real webhook sender signed with secret, opened to loopback.
func (e *env) startIsoWorker(t *testing.T, smtpURL, secret string, o isoOptions) *isoWorker {
	t.Helper()
	smtp, err := smtpsender.New(smtpsender.Config{URL: smtpURL, Timeout: 5 * time.Second})
	require.NoError(t, err)
	email, err := mail.NewSender(from, smtp)
	require.NoError(t, err)
	hooks, err := webhook.New(webhook.Config{Secret: secret, Timeout: hookTimeout,
		Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = hooks.Close() })
	channels := map[string]worker.Channel{
		notify.ChannelEmail: {Sender: email, Provider: "mail server", SendTimeout: 5 * time.Second, Rate: o.emailRate},
		channelWebhook:      {Sender: hooks, Provider: "webhook endpoint", SendTimeout: hookTimeout, DestinationConcurrency: isoShare},
	}
	sc := SourceConfig{RetryDelay: RetryDelay, Prefetch: worker.Window(isoSends), Lease: lease}
	if o.lease > 0 {
		sc.Lease = o.lease
	}
	reg := prometheus.NewRegistry()
	w, err := worker.New(e.h.NewSource(t, sc), e.h.Store, channels, worker.Config{
		MaxRetries:       maxRetries,
		StoreBackoff:     100 * time.Millisecond,
		Sends:            isoSends,
		SenderBackoffMax: isoBackoffMax,
		Registerer:       reg,
		Logger:           slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	require.NoError(t, err)
	cancel, stop := e.background(t, "worker", w.Run)
	return &isoWorker{runningWorker: &runningWorker{reg: reg, cancel: cancel, stop: stop}, w: w}
}

// channelWebhook is the webhook channel's name.
const channelWebhook = "webhook"

// createHook creates the webhook whose body carries k, to url.
func (e *env) createHook(t *testing.T, k, url string) notify.Notification {
	t.Helper()
	c, err := e.h.Store.Create(e.ctx, notify.NewNotification{Request: notify.CreateRequest{
		UserID: "hook-" + k, Channel: channelWebhook, To: url, Body: `{"k":"` + k + `"}`,
	}})
	require.NoError(t, err)
	return c.Notification
}

// flow is the healthy traffic of one measurement: batches of webhooks to
// urls, one after another until the first was created at least d ago
// (one batch at least), each created at once and waited for.
type flow struct {
	sent  []notify.Notification
	keys  []string
	span  time.Duration // from the first create to the last first arrival
	count int
}

func (f flow) rate() float64 { return float64(f.count) / f.span.Seconds() }

func (e *env) flow(t *testing.T, h *hub, tag string, urls []string, d time.Duration) flow {
	t.Helper()
	var f flow
	start := time.Now()
	for round := 0; round == 0 || time.Since(start) < d; round++ {
		keys := make([]string, batch)
		for i := range keys {
			keys[i] = fmt.Sprintf("%s-%d-%d", tag, round, i)
			f.sent = append(f.sent, e.createHook(t, keys[i], urls[i%len(urls)]))
		}
		require.Eventually(t, func() bool {
			n, _ := h.delivered(keys)
			return n == len(keys)
		}, flowWait, tick, "%s: batch %d not delivered", tag, round)
		f.keys = append(f.keys, keys...)
	}
	n, last := h.delivered(f.keys)
	f.count, f.span = n, last.Sub(start)
	return f
}

// checkFlows checks that every webhook of flows was sent once: status
// sent with one attempt, one request at its endpoint, no forged request.
func (e *env) checkFlows(t *testing.T, h *hub, flows ...flow) {
	t.Helper()
	for _, f := range flows {
		for _, n := range e.waitStatus(t, notify.StatusSent, f.sent...) {
			require.Equal(t, 1, n.Attempts, "attempts of webhook %d", n.ID)
		}
		for _, k := range f.keys {
			require.Equal(t, 1, h.requests(k), "requests of webhook %s", k)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Zero(t, h.refused, "requests that failed the signature check or carried no key")
}

// compare logs the healthy traffic's rates and requires the one during
// the fault to be at least minRatio of the one without it at the issue's
// size, stallRatio under make test.
func compare(t *testing.T, fault string, without, during flow) {
	t.Helper()
	ratio := during.rate() / without.rate()
	t.Logf("isolation %s: others' delivered/s without the fault %.1f (%d in %s), during it %.1f (%d in %s): %.2fx",
		fault, without.rate(), without.count, without.span.Round(time.Millisecond),
		during.rate(), during.count, during.span.Round(time.Millisecond), ratio)
	floor := stallRatio
	if os.Getenv(FaultEnv) != "" {
		floor = minRatio
	}
	require.GreaterOrEqual(t, ratio, floor,
		"%s: the others' delivered/s during the fault (%.1f) is below %.1fx of theirs without it (%.1f)",
		fault, during.rate(), floor, without.rate())
}

// endpoints starts n healthy endpoints of h.
func endpoints(h *hub, n int) []string {
	urls := make([]string, n)
	for i := range urls {
		urls[i] = h.endpoint()
	}
	return urls
}

// noRetries requires that the worker retried and dead-lettered nothing.
func (w *isoWorker) noRetries(t *testing.T) {
	t.Helper()
	got := w.outcomes(t)
	require.Zero(t, got[notify.OutcomeRetried], "retried deliveries")
	require.Zero(t, got[notify.OutcomeDead], "dead-lettered deliveries")
}

// The mail server refuses connections for the fault's length, with emails
// pending ahead of the webhooks (two windows of them: the most a worker
// holds, twice over); the webhooks flow as fast as without the outage, and
// once the server is back every email is delivered, once.
func testSMTPOutage(t *testing.T, e *env, fault time.Duration) {
	h, secret := newHub(t)
	urls := endpoints(h, hookEndpoints)
	e.h.Pump(t, e.ctx)
	addr, url := e.smtp.Addr(), e.smtp.URL()
	w := e.startIsoWorker(t, url, secret, isoOptions{})

	without := e.flow(t, h, "before", urls, 0)

	// The server goes away: connections are refused.
	e.smtp.Close()
	start := time.Now()
	emails := make([]notify.Notification, 2*worker.Window(isoSends))
	for i := range emails {
		emails[i] = e.create(t, i)
	}
	require.Eventually(t, func() bool {
		up, _ := w.w.ChannelStatus(notify.ChannelEmail)
		return !up
	}, wait, tick, "the email channel never saw the outage")
	during := e.flow(t, h, "outage", urls, fault-time.Since(start))
	require.Zero(t, e.smtp.Count(), "an email reached the server before the outage")
	for _, n := range emails {
		got, err := e.h.Store.Get(e.ctx, n.ID)
		require.NoError(t, err)
		require.Equal(t, notify.StatusPending, got.Status, "email %d during the outage", n.ID)
		require.Zero(t, got.Attempts, "attempts of email %d during the outage", n.ID)
	}
	t.Logf("outage lasted %s", time.Since(start).Round(time.Millisecond))

	// The server comes back on the same address.
	back, err := smtptest.New(smtptest.WithAddr(addr))
	require.NoError(t, err)
	t.Cleanup(back.Close)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.Equal(c, oneEach(emails), back.CountByMessageID())
	}, isoBackoffMax+wait, tick, "emails by Message-ID after the outage")
	for _, n := range e.waitStatus(t, notify.StatusSent, emails...) {
		require.Equal(t, 1, n.Attempts, "attempts of email %d", n.ID)
	}
	e.checkFlows(t, h, without, during)
	w.noRetries(t)
	compare(t, "SMTP outage", without, during)
}

// One endpoint of 20 is black-holed (its connects never complete), with
// two windows of webhooks to it pending ahead of the others'; the other
// 19 get their webhooks as fast as without it, and the black-holed one's
// spend no attempt: pending, attempts 0.
func testBlackHoledEndpoint(t *testing.T, e *env, fault time.Duration) {
	h, secret := newHub(t)
	urls := endpoints(h, 19)
	hole := "http://" + sendertest.BlackHole(t) + "/hook"
	e.h.Pump(t, e.ctx)
	w := e.startIsoWorker(t, e.smtp.URL(), secret, isoOptions{})

	without := e.flow(t, h, "before", urls, 0)

	// Finding the hole out costs what no design can spare: its first sends
	// (its share, isoShare) hang for the timeout before any of them can
	// tell. That is measured, and logged, but the criterion is the others'
	// rate while the hole is known, as it is for all but the first
	// hookTimeout of an outage that lasts minutes: each trial still holds
	// one slot for the timeout, once per backoff.
	start := time.Now()
	held := make([]notify.Notification, 2*worker.Window(isoSends))
	for i := range held {
		held[i] = e.createHook(t, fmt.Sprintf("hole-%d", i), hole)
	}
	finding := e.flow(t, h, "finding", urls, 0)
	require.Equal(t, 1, w.w.PausedDestinations(channelWebhook), "the black hole was not found out in %s", finding.span)
	during := e.flow(t, h, "hole", urls, fault-time.Since(start))
	elapsed := time.Since(start)
	for _, n := range held {
		got, err := e.h.Store.Get(e.ctx, n.ID)
		require.NoError(t, err)
		require.Equal(t, notify.StatusPending, got.Status, "webhook %d to the black hole", n.ID)
		require.Zero(t, got.Attempts, "attempts of webhook %d to the black hole", n.ID)
	}
	t.Logf("black hole for %s: its %d webhooks pending, 0 attempts spent; paused destinations %d",
		elapsed.Round(time.Millisecond), len(held), w.w.PausedDestinations(channelWebhook))
	require.Equal(t, 1, w.w.PausedDestinations(channelWebhook), "paused destinations")
	e.checkFlows(t, h, without, finding, during)
	w.noRetries(t)
	t.Logf("isolation black-holed endpoint: others' delivered/s while it was found out %.1f (%d in %s): %.2fx",
		finding.rate(), finding.count, finding.span.Round(time.Millisecond), finding.rate()/without.rate())
	compare(t, "black-holed endpoint", without, during)
}

// The email channel sends at most 1 a second, with a window of emails
// pending ahead of the webhooks; the webhooks flow as fast as without
// the emails.
func testEmailRate(t *testing.T, e *env, fault time.Duration) {
	h, secret := newHub(t)
	urls := endpoints(h, hookEndpoints)
	e.h.Pump(t, e.ctx)
	w := e.startIsoWorker(t, e.smtp.URL(), secret, isoOptions{emailRate: 1})

	without := e.flow(t, h, "before", urls, 0)

	start := time.Now()
	emails := make([]notify.Notification, worker.Window(isoSends))
	for i := range emails {
		emails[i] = e.create(t, i)
	}
	during := e.flow(t, h, "rated", urls, fault)
	elapsed := time.Since(start)
	sent := e.smtp.Count()
	t.Logf("email at 1/s: %d of %d emails sent in %s", sent, len(emails), elapsed.Round(time.Millisecond))
	// The rate was in force: no more than its burst (1) and a turn a
	// second since the emails were created.
	require.LessOrEqual(t, float64(sent), 2+elapsed.Seconds(), "emails sent under a rate of 1/s")
	require.Positive(t, sent, "no email was sent under its rate")
	e.checkFlows(t, h, without, during)
	w.noRetries(t)
	compare(t, "email rate 1/s", without, during)
}

// parkFor is how long the throttling endpoint asks to wait: longer than
// the source's lease (the table transport's row lease, SQS's visibility
// timeout as the suite's queues have it), so that the parked delivery
// outlives any lease it could have held.
const (
	parkLease = 3 * time.Second
	parkFor   = 7 * time.Second
)

// An endpoint throttles (429, Retry-After longer than the source's lease)
// once, then accepts: the delivery is parked past the lease and comes back
// after the wait, and the notification ends sent with one attempt, not
// stranded until the reconciler and with no retry spent.
func testParkedPastLease(t *testing.T, e *env, _ time.Duration) {
	h, secret := newHub(t)
	h.answer = func(_ string, n int, hd http.Header) int {
		if n == 1 {
			hd.Set("Retry-After", strconv.Itoa(int(parkFor/time.Second)))
			return http.StatusTooManyRequests
		}
		return http.StatusNoContent
	}
	url := h.endpoint()
	e.h.Pump(t, e.ctx)
	w := e.startIsoWorker(t, e.smtp.URL(), secret, isoOptions{lease: parkLease})

	start := time.Now()
	n := e.createHook(t, "parked", url)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := e.h.Store.Get(e.ctx, n.ID)
		require.NoError(c, err)
		require.Equal(c, notify.StatusSent, got.Status)
	}, parkFor+wait, tick, "the parked webhook was not sent within the wait it was asked for and %s", wait)
	took := time.Since(start)
	got, err := e.h.Store.Get(e.ctx, n.ID)
	require.NoError(t, err)
	require.Equal(t, 1, got.Attempts, "attempts: a throttle spends none")
	require.Equal(t, 2, h.requests("parked"), "requests: the throttled one and the accepted one")
	t.Logf("parked past the lease (%s) for the endpoint's %s: sent after %s", parkLease, parkFor, took.Round(time.Millisecond))
	require.GreaterOrEqual(t, took, parkFor, "sent before the wait the endpoint asked for")
	w.waitOutcomes(t, counts(1, 0, 0, 0))
}

// BrokerIsolationEnv names the environment variable that, set, runs the
// isolation subtests over a broker. make test runs them on the outbox
// table (SQLite and PostgreSQL) only; make test-long and make
// test-isolation set it. Their ratios are rates measured over seconds, and
// over a broker beside make test's other packages they were noisier: in
// six fresh-clone runs RabbitMQ's email-rate ratio fell once to 0.87x
// (1.02x and 1.18x alone), and goaws's lost receive answers cost the
// visibility timeout.
const BrokerIsolationEnv = "HERALD_TEST_BROKER_ISOLATION"

// BrokerIsolation skips t unless BrokerIsolationEnv is set.
func BrokerIsolation(t *testing.T) {
	t.Helper()
	if os.Getenv(BrokerIsolationEnv) == "" {
		t.Skipf("set %s=1 to run the isolation subtests over a broker (make test-long and make test-isolation do)", BrokerIsolationEnv)
	}
}
