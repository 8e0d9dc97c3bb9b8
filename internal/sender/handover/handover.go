// Package handover follows an HTTP request to a provider through its
// hand-over, so that a sender can classify a failure by the phase it
// happened in: before the hand-over (no connection, or the request not
// taken) the provider is down; during it, the failure is the message's
// attempt. The webhook and Telegram senders share it.
package handover

import (
	"context"
	"errors"
	"net"
	"net/http/httptrace"
	"sync/atomic"
)

// Trace records how far one request got. Its zero value is ready; it
// follows the requests made with the context Context returns.
type Trace struct {
	connected, wrote atomic.Bool
}

// Context returns ctx with t following the requests made with it.
func (t *Trace) Context(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { t.connected.Store(true) },
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				t.wrote.Store(true)
			}
		},
	})
}

// Connected reports whether the request got a connection.
func (t *Trace) Connected() bool { return t.connected.Load() }

// Wrote reports whether the request was written whole.
func (t *Trace) Wrote() bool { return t.wrote.Load() }

// Stalled reports whether err, the failure of a request made with ctx, is a
// deadline that passed before the provider took the request: a connect or
// TLS handshake that never completed, a black hole. Whichever deadline
// fired first (ctx's, or the dialer's or TLS handshake's own timers set to
// it), the outcome must not depend on that race: the provider is down, not
// the message.
func (t *Trace) Stalled(ctx context.Context, err error) bool {
	return !t.Wrote() && (ctx.Err() != nil || isTimeout(err))
}

// Unfinished names what had not happened when a request stalled.
func (t *Trace) Unfinished() string {
	if t.Connected() {
		return "the request not taken in time,"
	}
	return "no connection in time (the connect or TLS handshake unfinished),"
}

// isTimeout reports whether err is a network timeout: the dialer's or the
// TLS handshake's own.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
