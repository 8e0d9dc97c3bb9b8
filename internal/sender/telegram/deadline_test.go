package telegram_test

import (
	"context"
	"net/http/httptrace"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/telegram"
	"github.com/heraldhq/herald/internal/testkit/sendertest"
)

// A black-holed Bot API (a firewall that drops packets: the connect never
// completes; or a host that takes the connection and never speaks TLS) is
// the provider's outage, spending no attempt, whichever deadline fired
// first. An API that took the request and never answers is this message's
// attempt, whichever fired first. The token is in no error.
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
			b := startBotAPI(t)
			b.Set(sendertest.Hang)
			return b.srv.URL, func(t *testing.T) {
				require.Len(t, b.messages(), 1, "the request was handed over")
			}
		}, sendertest.Retry},
	} {
		for _, order := range sendertest.DeadlineOrders {
			t.Run(peer.name+"/"+order.Name, func(t *testing.T) {
				t.Parallel()
				base, check := peer.start(t)
				s := newSender(t, telegram.Config{APIBase: base, Timeout: order.Timeout})
				ctx, cancel := context.WithTimeout(context.Background(), order.Caller)
				defer cancel()
				start := time.Now()
				err := s.Send(ctx, message("bh", "42", "hi"))
				require.Less(t, time.Since(start), time.Minute, "the send ended at the first deadline")
				require.Equal(t, peer.want, sendertest.OutcomeOf(t, err), "error %v", err)
				require.False(t, notify.IsPermanent(err), "error %v", err)
				_, scoped := notify.DestinationOf(err)
				require.False(t, scoped, "the Bot API's failures are channel-wide: %v", err)
				require.NotContains(t, err.Error(), testToken)
				if peer.want == sendertest.ProviderDown {
					require.ErrorContains(t, err, "before the request was handed over")
				} else {
					require.ErrorIs(t, err, context.DeadlineExceeded)
				}
				check(t)
			})
		}
	}
}

// A caller that cancels while the connect or the TLS handshake is under
// way gets a plain error: it says nothing about the Bot API, which is not
// reported down.
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
			s := newSender(t, telegram.Config{APIBase: tc.base(t), Timeout: time.Hour})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			err := s.Send(httptrace.WithClientTrace(ctx, tc.trace(cancel)), message("c", "42", "hi"))
			require.Equal(t, sendertest.Retry, sendertest.OutcomeOf(t, err), "error %v", err)
			require.ErrorIs(t, err, context.Canceled)
			require.NotContains(t, err.Error(), testToken)
		})
	}
}
