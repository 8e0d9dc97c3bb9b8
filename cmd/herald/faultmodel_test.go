package main

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/smtptest"
)

// The delivery fault model against the built binary (issue 16): a local
// rate limit, a message that drops the connection, a throttling provider,
// and the chapter's exercise 4 with an unreachable server.

// servedStack is herald serve (SQLite, the outbox table) against an SMTP
// server of the test's own.
type servedStack struct {
	t    *testing.T
	api  client
	db   string
	proc *proc
}

func newServed(t *testing.T, srv *smtptest.Server, env map[string]string) *servedStack {
	t.Helper()
	dir := t.TempDir()
	addr := freeAddr(t)
	e := map[string]string{"HERALD_HTTP_ADDR": addr, "HERALD_SMTP_FROM": "herald@example.com", "HERALD_RELAY_INTERVAL": "100ms"}
	if srv != nil {
		e["HERALD_SMTP_URL"] = srv.URL()
	}
	for k, v := range env {
		e[k] = v
	}
	p := startHerald(t, dir, e, "serve")
	s := &servedStack{t: t, api: client{base: "http://" + addr}, db: filepath.Join(dir, "herald.db"), proc: p}
	waitHTTP(t, s.api.base+"/healthz")
	return s
}

func (s *servedStack) count(query string, args ...any) int {
	s.t.Helper()
	return sqliteCount(s.t, s.db, query, args...)
}

// A local rate limit delays sends and never spends an attempt: 40
// notifications at 4 emails/s with a 2 s send timeout and 2 retries all go
// out once (the old build waited for the turn inside the send's timeout and
// failed the ones that missed it), and no faster than the limit.
func TestRateLimitSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	const n, rate = 40, 4
	s := newServed(t, srv, map[string]string{
		"HERALD_SMTP_RATE": fmt.Sprint(rate), "HERALD_SMTP_TIMEOUT": "2s", "HERALD_MAX_RETRIES": "2",
		"HERALD_RETRY_DELAY": "200ms", "HERALD_PREFETCH": "16",
	})
	start := time.Now()
	ids := createMany(t, s.api, n, 8)
	require.Len(t, ids, n)
	waitFor(t, 60*time.Second, 100*time.Millisecond, func() bool {
		return s.count("SELECT count(*) FROM notifications WHERE status <> 'pending'") == n
	}, func() string {
		return fmt.Sprintf("%d of %d settled", s.count("SELECT count(*) FROM notifications WHERE status <> 'pending'"), n)
	})
	took := time.Since(start)
	require.Zero(t, s.count("SELECT count(*) FROM notifications WHERE status = 'failed'"), "the rate limit failed a notification")
	require.Equal(t, n, s.count("SELECT count(*) FROM delivery_attempts"), "one attempt each, all sent")
	require.Equal(t, n, s.count("SELECT count(*) FROM delivery_attempts WHERE outcome = 'sent'"))
	require.Equal(t, n, srv.Count())
	// A burst of one second's worth, then rate per second.
	least := time.Duration(float64(n-rate) / rate * float64(time.Second))
	require.GreaterOrEqual(t, took, least-200*time.Millisecond, "the limit was applied")
	t.Logf("%d emails at HERALD_SMTP_RATE=%d in %s", n, rate, took.Round(time.Millisecond))
}

// A message that makes the server drop the connection after its DATA is
// this message's attempt: it is dead-lettered after its retries, while the
// rest of the mail keeps flowing and the sender is never taken for down.
func TestDroppedConnectionMessageDeadLettered(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	srv.DropAfterData(func(rcpt string) bool { return strings.HasPrefix(rcpt, "drop") })
	s := newServed(t, srv, map[string]string{"HERALD_MAX_RETRIES": "2", "HERALD_RETRY_DELAY": "300ms"})

	bad := s.api.create(t, "drop@example.com", nil)
	require.Equal(t, 201, bad.Status, bad.Body)
	const good = 60
	start := time.Now()
	ids := createMany(t, s.api, good, 4)
	require.Len(t, ids, good)
	n := waitStatusAPI(t, s.api, bad.ID, "failed", 60*time.Second)
	require.Equal(t, 3, n.Attempts, "the first attempt and two retries")
	require.Equal(t, []string{"retry", "retry", "dead"}, outcomes(s.api.attempts(t, bad.ID)))
	waitFor(t, 60*time.Second, 50*time.Millisecond, func() bool {
		return s.count("SELECT count(*) FROM notifications WHERE status = 'sent'") == good
	}, func() string {
		return fmt.Sprintf("%d of %d good notifications sent", s.count("SELECT count(*) FROM notifications WHERE status = 'sent'"), good)
	})
	t.Logf("%d good emails in %s while one message dropped the connection %d times", good, time.Since(start).Round(time.Millisecond), srv.Drops())
	require.Equal(t, 3, srv.Drops())
	for id, c := range srv.CountByMessageID() {
		require.Equal(t, 1, c, id)
	}
	require.Equal(t, float64(1), scrape(t, s.api.base+"/metrics", `herald_sender_up{channel="email"}`), "the sender was never taken for down")
	require.NotContains(t, s.proc.Log(), "sends paused", "no outage was declared for one message's fault")
}

// A provider that answers 421 to MAIL FROM (greeting, EHLO and NOOP fine)
// is throttling: herald backs off with a growing delay that the probe's
// success does not reset, spends no attempt, and sends everything once it
// takes mail again. The old build sent 157 MAIL commands for 5 messages in
// 20 s. Here 8 s (four backoff steps; the old build's rate would be some
// 60): the 20 s is TestLongThrottlingProviderNotHammered, a minute
// TestLongThrottlingForAMinute (make test-long).
func TestThrottlingProviderNotHammered(t *testing.T) {
	t.Parallel()
	throttled(t, 8*time.Second, 5)
}

// throttled runs a provider answering 421 to MAIL for d with n messages
// waiting, and returns the MAIL commands it received meanwhile.
func throttled(t *testing.T, d time.Duration, n int) int {
	srv := smtptest.Start(t)
	p := newServed(t, srv, nil)
	srv.FailAt(smtptest.StepMail, 421, "4.7.0 Too many messages, slow down")
	before := srv.MailCommands()
	ids := createMany(t, p.api, n, n)
	require.Len(t, ids, n)
	<-time.After(d) // the throttle's length is the behaviour under test
	mails := srv.MailCommands() - before
	srv.FailAt(smtptest.StepMail, 0, "")
	t.Logf("MAIL commands during a %s throttle with %d messages: %d", d, n, mails)
	// Each message may meet the 421 once before the gate closes (twice: a
	// kept session's 421 is tried again on a fresh one); after that, one
	// trial send per backoff step, 1 s doubling to 60 s, jittered on the
	// upper half: the steps' lower halves (0.5, 1, 2, 4, 8, 16, 30, 30, ...
	// seconds) bound how many trials fit in d.
	trials, at := 0, time.Duration(0)
	for step := time.Second; at+step/2 <= d; step = min(2*step, time.Minute) {
		at += step / 2
		trials++
	}
	require.LessOrEqual(t, mails, 2*(n+trials), "the throttling provider was hammered")
	waitFor(t, 3*time.Minute, 100*time.Millisecond, func() bool {
		return p.count("SELECT count(*) FROM notifications WHERE status = 'sent'") == n
	}, func() string { return "not every notification was sent after the throttle" })
	require.Zero(t, p.count("SELECT count(*) FROM delivery_attempts WHERE outcome IN ('retry', 'dead')"), "throttling spent an attempt")
	p.proc.requireLogError("421") // an ERROR names the throttling reply
	return mails
}

// The chapter's exercise 4 as written: an SMTP server that cannot be
// reached, HERALD_SMTP_OUTAGE=attempt, five retries, then the dead letters.
// With the default (wait) the same outage spends nothing.
func TestExerciseUnreachableServerSpendsAttempts(t *testing.T) {
	t.Parallel()
	closed := freeAddr(t) // nothing listens there
	s := newServed(t, nil, map[string]string{
		"HERALD_SMTP_URL": "smtp://" + closed, "HERALD_SMTP_OUTAGE": "attempt", "HERALD_RETRY_DELAY": "200ms",
	})
	r := s.api.create(t, "ann@example.com", nil)
	require.Equal(t, 201, r.Status, r.Body)
	n := waitStatusAPI(t, s.api, r.ID, "failed", 60*time.Second)
	require.Equal(t, 6, n.Attempts, "the first attempt and five retries")
	require.NotNil(t, n.LastError)
	require.Contains(t, *n.LastError, "dial")
}

// The worker's /readyz says why its sender is paused, and follows each
// change of reason.
func TestWorkerReadyzNamesSenderReason(t *testing.T) {
	t.Parallel()
	p := newProviderStack(t, nil)
	ids := createMany(t, p.api, 1, 1)
	require.Len(t, ids, 1)
	p.waitAllSent(p.smtp, ids, 30*time.Second)
	p.smtp.FailAt(smtptest.StepMail, 421, "4.7.0 slow down")
	ids = createMany(t, p.api, 2, 2)
	require.Len(t, ids, 2)
	readyz := "http://" + p.metrics + "/readyz"
	var body string
	waitFor(t, 30*time.Second, 50*time.Millisecond, func() bool {
		code, b := get(t, readyz)
		body = b
		return code == http.StatusServiceUnavailable && strings.Contains(b, "421") && strings.Contains(b, `"sender:email"`)
	}, func() string { return "worker /readyz never named the 421 under sender:email: " + body })
	p.smtp.FailAt(smtptest.StepMail, 0, "")
	p.waitAllSent(p.smtp, ids, 90*time.Second)
	waitFor(t, 30*time.Second, 50*time.Millisecond, func() bool {
		code, b := get(t, readyz)
		body = b
		return code == http.StatusOK
	}, func() string { return "worker /readyz not ready after the throttle: " + body })
}

var getMu sync.Mutex

// get fetches url and returns the status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	getMu.Lock()
	defer getMu.Unlock()
	resp, err := httpClient.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
