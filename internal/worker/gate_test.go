package worker

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// newBreaker returns a breaker with no jitter (the whole backoff), base 1s
// and ceiling 8s, for schedules that can be checked exactly.
func newBreaker() *breaker {
	return &breaker{base: time.Second, ceiling: 8 * time.Second, downCloses: true,
		jitter: func(d time.Duration) time.Duration { return d }}
}

var (
	t0       = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	refused  = notify.SenderDown(errors.New("dial: connection refused"))
	noTLS    = notify.SenderDown(errors.New("server does not offer STARTTLS"))
	slowDown = notify.Throttled(errors.New("421 4.7.0 try again later"), 0)
	errTrans = errors.New("451 4.3.0 mailbox busy")
)

func at(d time.Duration) time.Time { return t0.Add(d) }

// An outage closes the gate; after each backoff one delivery probes; a
// passing probe makes it the trial; others wait for the trial's answer;
// only the trial's success opens the gate and forgets the failures.
func TestBreakerOutageProbeTrial(t *testing.T) {
	t.Parallel()
	b := newBreaker()
	tr, _ := b.take(at(0), true)
	require.Equal(t, turnPass, tr)

	require.Equal(t, eventClosed, b.report(at(0), false, refused))
	require.Equal(t, gateClosed, b.state)
	require.Equal(t, classDown, b.class)
	// Sends under way when it closed fail too: no more failures counted.
	require.Equal(t, eventNone, b.report(at(0), false, refused))
	require.Equal(t, 1, b.failures)

	tr, wait := b.take(at(0), true)
	require.Equal(t, turnWait, tr)
	require.Equal(t, time.Second, wait, "base backoff")

	// A failed probe doubles the backoff; a new reason is an event.
	tr, _ = b.take(at(time.Second), true)
	require.Equal(t, turnProbe, tr)
	tr, wait = b.take(at(time.Second), true)
	require.Equal(t, turnWait, tr, "one probe at a time")
	require.Zero(t, wait, "wait for the probe's answer")
	require.Equal(t, eventReason, b.probeDone(at(time.Second), noTLS))
	require.Equal(t, noTLS.Error(), b.reason)
	tr, wait = b.take(at(time.Second), true)
	require.Equal(t, turnWait, tr)
	require.Equal(t, 2*time.Second, wait)

	// The probe passes: its caller is the trial; the trial fails: closed
	// again, with a backoff grown once more.
	tr, _ = b.take(at(3*time.Second), true)
	require.Equal(t, turnProbe, tr)
	require.Equal(t, eventNone, b.probeDone(at(3*time.Second), nil))
	require.Equal(t, gateTrial, b.state)
	tr, _ = b.take(at(3*time.Second), true)
	require.Equal(t, turnWait, tr, "one trial at a time")
	require.Equal(t, eventReason, b.report(at(3*time.Second), true, refused))
	require.Equal(t, gateClosed, b.state)
	_, wait = b.take(at(3*time.Second), true)
	require.Equal(t, 4*time.Second, wait)

	// A success of a send that predates the outage opens nothing.
	require.Equal(t, eventNone, b.report(at(4*time.Second), false, nil))
	require.Equal(t, gateClosed, b.state)
	require.Equal(t, 3, b.failures)

	tr, _ = b.take(at(7*time.Second), true)
	require.Equal(t, turnProbe, tr)
	b.probeDone(at(7*time.Second), nil)
	require.Equal(t, eventOpened, b.report(at(7*time.Second), true, nil))
	require.Equal(t, gateOpen, b.state)
	require.Zero(t, b.failures)
	require.Equal(t, 5, b.tries, "three probes and two trials")
}

// Throttling needs no probe: the first turn is the trial. The backoff is
// at least the provider's wait. A trial refused for the message's own sake
// opens the gate but keeps the failures: the next closure pauses longer,
// until a real send succeeds.
func TestBreakerThrottled(t *testing.T) {
	t.Parallel()
	b := newBreaker()
	require.Equal(t, eventClosed, b.report(at(0), false, notify.Throttled(errors.New(slowDown.Error()), 3*time.Second)))
	require.Equal(t, classThrottled, b.class)
	_, wait := b.take(at(0), true)
	require.Equal(t, 3*time.Second, wait, "the provider's wait beats the base backoff")

	tr, _ := b.take(at(3*time.Second), true)
	require.Equal(t, turnTrial, tr, "no probe for throttling")
	require.Equal(t, eventNone, b.report(at(3*time.Second), true, slowDown))
	_, wait = b.take(at(3*time.Second), true)
	require.Equal(t, 2*time.Second, wait)

	tr, _ = b.take(at(5*time.Second), true)
	require.Equal(t, turnTrial, tr)
	require.Equal(t, eventOpened, b.report(at(5*time.Second), true, notify.Permanent(errors.New("550 no such user"))))
	require.Equal(t, gateOpen, b.state)
	require.Equal(t, 2, b.failures, "a refused message proves the server answers, not that it takes mail")

	require.Equal(t, eventClosed, b.report(at(6*time.Second), false, slowDown))
	_, wait = b.take(at(6*time.Second), true)
	require.Equal(t, 4*time.Second, wait, "the backoff kept growing")

	tr, _ = b.take(at(10*time.Second), true)
	require.Equal(t, turnTrial, tr)
	require.Equal(t, eventOpened, b.report(at(10*time.Second), true, errTrans))
	require.Equal(t, 3, b.failures)
	// A real send succeeding while open forgets the failures.
	require.Equal(t, eventNone, b.report(at(11*time.Second), false, nil))
	require.Zero(t, b.failures)
}

// A send under way when the gate closed may bring the provider's wait: it
// pushes the next turn back, without counting a failure.
func TestBreakerInFlightThrottleWaitPushesTheTurn(t *testing.T) {
	t.Parallel()
	b := newBreaker()
	b.report(at(0), false, refused)
	require.Equal(t, eventReason, b.report(at(0), false, notify.Throttled(errors.New("421 slow down"), 30*time.Second)))
	require.Equal(t, 1, b.failures)
	_, wait := b.take(at(0), false)
	require.Equal(t, 30*time.Second, wait)
}

// The backoff doubles up to the ceiling.
func TestBreakerBackoffCeiling(t *testing.T) {
	t.Parallel()
	b := newBreaker()
	b.report(at(0), false, slowDown)
	now := at(0)
	var waits []time.Duration
	for range 6 {
		_, wait := b.take(now, false)
		waits = append(waits, wait)
		now = now.Add(wait)
		tr, _ := b.take(now, false)
		require.Equal(t, turnTrial, tr)
		b.report(now, true, slowDown)
	}
	require.Equal(t, []time.Duration{1, 2, 4, 8, 8, 8}, scale(waits, time.Second))
}

func scale(ds []time.Duration, unit time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d / unit
	}
	return out
}

// The default jitter stays in the upper half of the backoff.
func TestBreakerJitter(t *testing.T) {
	t.Parallel()
	b := &breaker{base: time.Second, ceiling: 8 * time.Second, downCloses: true}
	b.failures = 3
	for range 1000 {
		d := b.backoff(0)
		require.GreaterOrEqual(t, d, 2*time.Second)
		require.LessOrEqual(t, d, 4*time.Second)
	}
}

// A trial (or probe) abandoned before any send gives the turn to the next
// delivery at once; a passed probe is not repeated.
func TestBreakerAbandon(t *testing.T) {
	t.Parallel()
	b := newBreaker()
	b.report(at(0), false, refused)
	tr, _ := b.take(at(time.Second), true)
	require.Equal(t, turnProbe, tr)
	b.abandon()
	tr, _ = b.take(at(time.Second), true)
	require.Equal(t, turnProbe, tr, "the probe's turn came back")
	b.probeDone(at(time.Second), nil)
	b.abandon()
	require.Equal(t, gateClosed, b.state)
	tr, _ = b.take(at(time.Second), true)
	require.Equal(t, turnTrial, tr, "the probe passed already: straight to the trial")
	// Abandon without the turn changes nothing.
	b.report(at(time.Second), true, nil)
	b.abandon()
	require.Equal(t, gateOpen, b.state)
}

// When an outage spends attempts, SenderDown is the message's failure: the
// gate stays open; throttling still closes it.
func TestBreakerOutageSpendsAttempts(t *testing.T) {
	t.Parallel()
	b := newBreaker()
	b.downCloses = false
	require.Equal(t, eventNone, b.report(at(0), false, refused))
	require.Equal(t, gateOpen, b.state)
	require.Equal(t, eventClosed, b.report(at(0), false, slowDown))
	tr, _ := b.take(at(time.Second), true)
	require.Equal(t, turnTrial, tr)
	require.Equal(t, eventOpened, b.report(at(time.Second), true, refused), "an outage is the message's failure: the server answered")
}

// A send and a probe that meet the same failure give one reason: the log
// says "another reason" only when the failure changed.
func TestSameReason(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"smtp send: dial 127.0.0.1:25: connection refused", "smtp probe: dial 127.0.0.1:25: connection refused", true},
		{"smtp send: dial 127.0.0.1:25: connection refused", "smtp send: the server does not offer STARTTLS", false},
		{"421 at MAIL FROM: slow down", "421 at MAIL FROM: slow down", true},
		{"resend: x", "send: x", false},
		{"smtp probe: no answer within the 2s timeout (read tcp 127.0.0.1:51328->127.0.0.1:35143: use of closed network connection)",
			"smtp probe: no answer within the 2s timeout (read tcp 127.0.0.1:60346->127.0.0.1:35143: use of closed network connection)", true},
	} {
		require.Equal(t, c.same, sameReason(c.a, c.b), "%q vs %q", c.a, c.b)
	}
}
