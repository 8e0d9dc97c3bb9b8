package sendertest

import (
	"net"
	"testing"
	"time"
)

// Silent returns a loopback address ("127.0.0.1:port") that takes TCP
// connections (the kernel completes them) and never reads or writes a
// byte: a TLS handshake to it never completes, and no HTTP request is
// ever read. The listener closes at cleanup.
func Silent(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("silent listener: %v", err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln.Addr().String()
}

// DeadlineOrder is one way a Send's time runs out: Timeout is the
// sender's own, Caller the deadline of the context it is given.
type DeadlineOrder struct {
	Name            string
	Timeout, Caller time.Duration
}

// DeadlineOrders are the caller's deadline first (the worker's, when it is
// no longer than the sender's timeout), the sender's own timeout first,
// and both at the same instant: an outcome must not depend on which fired.
var DeadlineOrders = []DeadlineOrder{
	{"caller's deadline first", time.Hour, time.Second},
	{"sender's timeout first", time.Second, time.Hour},
	{"both at once", time.Second, time.Second},
}
