package sendertest

import (
	"net"
	"testing"
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
