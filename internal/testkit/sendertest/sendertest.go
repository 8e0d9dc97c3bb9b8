// Package sendertest is the conformance suite every channel's sender
// passes: Run sends through the channel's real sender to a real peer (an
// HTTP server, an SMTP server) made to behave in each way the worker must
// tell apart, and checks how the sender classifies the outcome.
//
// The suite knows no protocol: a Harness maps each Behaviour onto its
// peer. The webhook's maps them onto HTTP statuses (204, 410, 500, 429
// with Retry-After, no answer) and a closed listener; an SMTP harness on
// internal/testkit/smtptest would map Reject onto a 5xx to RCPT, Fail onto a 4xx
// to DATA, Throttle onto a 421 (declaring NoRetryAfter: SMTP names no
// wait), Hang onto no reply to DATA and Down onto a closed listener, with
// the Message-ID as the identity.
package sendertest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// Behaviour is how a peer answers the sends that follow Peer.Set. A
// harness maps each onto its protocol.
type Behaviour int

const (
	// Accept: the peer takes the message (webhook: 2xx; SMTP: 250).
	Accept Behaviour = iota
	// Reject: the peer refuses this message for good (webhook: 410).
	Reject
	// Fail: the peer fails this message, for now (webhook: 500).
	Fail
	// Down: the provider cannot be reached, or refuses us before the
	// message is handed over (connection refused; a bad token).
	Down
	// Throttle: the provider asks to slow down for Harness.RetryAfter.
	Throttle
	// Hang: the peer takes the request and does not answer before the
	// sender's timeout.
	Hang
)

func (b Behaviour) String() string {
	switch b {
	case Accept:
		return "accept"
	case Reject:
		return "reject"
	case Fail:
		return "fail"
	case Down:
		return "down"
	case Throttle:
		return "throttle"
	case Hang:
		return "hang"
	}
	return fmt.Sprintf("Behaviour(%d)", int(b))
}

// Outcome is how the worker reads a Send's result.
type Outcome string

const (
	Sent         Outcome = "sent"        // delivered
	Permanent    Outcome = "permanent"   // dead-letter now
	Retry        Outcome = "retry"       // an attempt spent, retried later
	ProviderDown Outcome = "sender down" // no attempt spent: pause, probe
	Throttled    Outcome = "throttled"   // no attempt spent: slow down
)

// Sender is the seam under test.
type Sender interface {
	Send(ctx context.Context, m notify.Outgoing) error
}

// Peer is one running peer for the channel, with its cleanup registered
// on the test that started it.
type Peer interface {
	// Set makes the peer answer the following sends with b. Down may make
	// the peer unreachable for good (a closed listener).
	Set(b Behaviour)
	// Sender returns the channel's real sender, built to reach this peer,
	// with timeout bounding one Send.
	Sender(t *testing.T, timeout time.Duration) Sender
	// Outgoing returns a valid message for this peer, as notification id.
	Outgoing(id string) notify.Outgoing
	// Received lists the requests that reached the peer, in order.
	Received() []Received
}

// Received is one request as it reached the peer.
type Received struct {
	// Identity is the idempotency identity the request carried (webhook:
	// the webhook-id header; email: the Message-ID), "" when none.
	Identity string
	// Body is the message's body as the peer decoded it.
	Body string
}

// Harness is what a channel provides to Run.
type Harness struct {
	// Start starts a fresh peer for one subtest.
	Start func(t *testing.T) Peer
	// RetryAfter is the wait the peer names when it throttles; Run
	// checks that the sender passes it through. Zero only with
	// NoRetryAfter.
	RetryAfter time.Duration
	// NoRetryAfter, when not empty, declares that the channel's provider
	// names no wait when it throttles, and why (SMTP's 421 has none): Run
	// then checks that the throttle carries none.
	NoRetryAfter string
	// Destination is non-nil for a channel whose failures of the provider
	// (Down, Throttle) concern one destination, not the whole channel
	// (webhook: one endpoint): it returns the key m's failures must be
	// scoped to with notify.ForDestination. Nil: channel-wide, and Run
	// checks that no such scope is given.
	Destination func(m notify.Outgoing) string
	// NoIdentity, when not empty, declares that the channel carries no
	// idempotency identity, and why (Telegram's Bot API has none): Run
	// then checks that the requests indeed carry none, instead of checking
	// that every attempt carries the same one.
	NoIdentity string
}

// hangTimeout is the sender timeout in the Hang case: long enough for a
// loopback request to reach the peer on a loaded machine.
const hangTimeout = time.Second

// sendTimeout bounds every other send of the suite.
const sendTimeout = 10 * time.Second

// Run runs the suite against h.
func Run(t *testing.T, h Harness) {
	require.NotNil(t, h.Start, "Harness.Start")
	if h.NoRetryAfter == "" {
		require.Positive(t, h.RetryAfter, "Harness.RetryAfter: the peer's throttle names a wait, or the harness declares NoRetryAfter")
	} else {
		require.Zero(t, h.RetryAfter, "Harness.RetryAfter given with NoRetryAfter")
	}

	cases := []struct {
		b    Behaviour
		want Outcome
		// reached: the request must have reached the peer.
		reached bool
	}{
		{Accept, Sent, true},
		{Reject, Permanent, true},
		{Fail, Retry, true},
		{Down, ProviderDown, false},
		{Throttle, Throttled, false},
		{Hang, Retry, true},
	}
	for _, tc := range cases {
		t.Run(tc.b.String(), func(t *testing.T) {
			t.Parallel()
			p := h.Start(t)
			p.Set(tc.b)
			timeout := sendTimeout
			if tc.b == Hang {
				timeout = hangTimeout
			}
			s := p.Sender(t, timeout)
			m := p.Outgoing("conf-" + tc.b.String())
			err := s.Send(context.Background(), m)
			require.Equal(t, tc.want, OutcomeOf(t, err), "%s: error %v", tc.b, err)
			got := p.Received()
			if tc.reached {
				require.Len(t, got, 1, "%s: the request reached the peer once", tc.b)
				require.Contains(t, got[0].Body, strings.TrimSpace(m.Body), "%s: the body reached the peer", tc.b)
			}
			switch tc.want {
			case ProviderDown:
				checkScope(t, h, m, err)
			case Throttled:
				checkScope(t, h, m, err)
				after, _ := notify.IsThrottled(err)
				if h.NoRetryAfter != "" {
					t.Logf("the channel declares no retry-after: %s", h.NoRetryAfter)
				}
				require.Equal(t, h.RetryAfter, after, "the peer's retry-after comes through")
			default:
				_, scoped := notify.DestinationOf(err)
				require.False(t, scoped, "%s: only a provider's failure is scoped to a destination: %v", tc.b, err)
			}
		})
	}

	t.Run("identity", func(t *testing.T) {
		t.Parallel()
		p := h.Start(t)
		s := p.Sender(t, sendTimeout)
		m := p.Outgoing("conf-identity")
		p.Set(Fail)
		for range 2 {
			require.Equal(t, Retry, OutcomeOf(t, s.Send(context.Background(), m)))
		}
		p.Set(Accept)
		require.NoError(t, s.Send(context.Background(), m))
		require.NoError(t, s.Send(context.Background(), p.Outgoing("conf-identity-other")))
		got := p.Received()
		require.Len(t, got, 4, "every attempt reached the peer")
		if h.NoIdentity != "" {
			t.Logf("the channel declares no idempotency identity: %s", h.NoIdentity)
			for i, r := range got {
				require.Empty(t, r.Identity, "request %d carries an identity the harness declared absent", i)
			}
			return
		}
		first := got[0].Identity
		require.NotEmpty(t, first, "the request carries an idempotency identity (or the harness must declare NoIdentity)")
		for i, r := range got[:3] {
			require.Equal(t, first, r.Identity, "attempt %d of the same notification", i+1)
		}
		require.NotEqual(t, first, got[3].Identity, "another notification has another identity")
	})
}

// checkScope checks that a provider's failure is scoped as h declares.
func checkScope(t *testing.T, h Harness, m notify.Outgoing, err error) {
	t.Helper()
	key, scoped := notify.DestinationOf(err)
	if h.Destination == nil {
		require.False(t, scoped, "a channel-wide failure is not scoped to a destination (%q): %v", key, err)
		return
	}
	require.True(t, scoped, "the failure is scoped to its destination: %v", err)
	require.NotEmpty(t, key)
	require.Equal(t, h.Destination(m), key)
}

// OutcomeOf reads err as the worker does, and fails when err carries more
// than one mark: the worker could not tell what it means.
func OutcomeOf(t *testing.T, err error) Outcome {
	t.Helper()
	if err == nil {
		return Sent
	}
	var marks []Outcome
	if notify.IsPermanent(err) {
		marks = append(marks, Permanent)
	}
	if notify.IsSenderDown(err) {
		marks = append(marks, ProviderDown)
	}
	if _, ok := notify.IsThrottled(err); ok {
		marks = append(marks, Throttled)
	}
	require.LessOrEqual(t, len(marks), 1, "marked %v: %v", marks, err)
	if len(marks) == 0 {
		return Retry
	}
	return marks[0]
}
