package webhook_test

import (
	"context"
	"net/http/httptrace"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/webhook"
	"github.com/heraldhq/herald/internal/testkit/sendertest"
)

// A black-holed endpoint (a firewall that drops packets: the connect
// never completes; or one that takes the connection and never speaks
// TLS) is the endpoint's outage, scoped to it and spending no attempt,
// whichever deadline fired first. An endpoint that took the request and
// never answers is this message's attempt, whichever fired first.
func TestSendDeadlineByPhase(t *testing.T) {
	t.Parallel()
	for _, peer := range []struct {
		name string
		// start starts the peer and returns its base URL and a check
		// of what reached it.
		start func(t *testing.T) (base string, check func(t *testing.T))
		want  sendertest.Outcome
	}{
		{"connect never completes", func(t *testing.T) (string, func(*testing.T)) {
			return "http://" + sendertest.BlackHole(t), func(*testing.T) {}
		}, sendertest.ProviderDown},
		{"TLS handshake never completes", func(t *testing.T) (string, func(*testing.T)) {
			return "https://" + sendertest.Silent(t), func(*testing.T) {}
		}, sendertest.ProviderDown},
		{"request taken, never answered", func(t *testing.T) (string, func(*testing.T)) {
			r := startReceiver(t)
			r.Set(sendertest.Hang)
			return r.srv.URL, func(t *testing.T) {
				require.Len(t, r.requests(), 1, "the request was handed over")
			}
		}, sendertest.Retry},
	} {
		for _, order := range sendertest.DeadlineOrders {
			t.Run(peer.name+"/"+order.Name, func(t *testing.T) {
				t.Parallel()
				base, check := peer.start(t)
				s := newSender(t, webhook.Config{Allow: loopback, Timeout: order.Timeout})
				m := notify.Outgoing{NotificationID: "bh", To: base + "/hooks/x", Body: `{}`}
				ctx, cancel := context.WithTimeout(context.Background(), order.Caller)
				defer cancel()
				start := time.Now()
				err := s.Send(ctx, m)
				require.Less(t, time.Since(start), time.Minute, "the send ended at the first deadline")
				require.Equal(t, peer.want, sendertest.OutcomeOf(t, err), "error %v", err)
				require.False(t, notify.IsPermanent(err), "error %v", err)
				key, scoped := notify.DestinationOf(err)
				if peer.want == sendertest.ProviderDown {
					require.True(t, scoped, "one endpoint's outage pauses only its deliveries: %v", err)
					require.Equal(t, s.Destination(m), key)
					require.ErrorContains(t, err, "before the request was handed over")
				} else {
					require.False(t, scoped, "the message's attempt is not the endpoint's outage: %v", err)
					require.ErrorIs(t, err, context.DeadlineExceeded)
				}
				check(t)
			})
		}
	}
}

// A caller that cancels while the connect or the TLS handshake is under
// way gets a plain error: it says nothing about the endpoint, which is
// not reported down.
func TestSendCancelledBeforeHandOver(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		base  func(t *testing.T) string
		trace func(cancel func()) *httptrace.ClientTrace
	}{
		{"during the connect", func(t *testing.T) string { return "http://" + sendertest.BlackHole(t) }, func(cancel func()) *httptrace.ClientTrace {
			return &httptrace.ClientTrace{ConnectStart: func(string, string) { cancel() }}
		}},
		{"during the TLS handshake", func(t *testing.T) string { return "https://" + sendertest.Silent(t) }, func(cancel func()) *httptrace.ClientTrace {
			return &httptrace.ClientTrace{TLSHandshakeStart: func() { cancel() }}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSender(t, webhook.Config{Allow: loopback, Timeout: time.Hour})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			err := s.Send(httptrace.WithClientTrace(ctx, tc.trace(cancel)), notify.Outgoing{NotificationID: "c", To: tc.base(t) + "/x", Body: `{}`})
			require.Equal(t, sendertest.Retry, sendertest.OutcomeOf(t, err), "error %v", err)
			require.ErrorIs(t, err, context.Canceled)
			_, scoped := notify.DestinationOf(err)
			require.False(t, scoped, "error %v", err)
		})
	}
}
