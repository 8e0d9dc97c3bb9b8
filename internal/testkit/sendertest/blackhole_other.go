//go:build !linux

package sendertest

import "testing"

// BlackHole returns a loopback address whose TCP connects never
// complete. It is built on Linux's handling of a full accept queue (SYNs
// dropped); elsewhere it skips the test.
func BlackHole(t testing.TB) string {
	t.Helper()
	t.Skip("black hole: needs Linux (a full accept queue that drops SYNs)")
	return ""
}
