//go:build linux

package sendertest

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// BlackHole returns a loopback address ("127.0.0.1:port") whose TCP
// connects never complete, as to a firewalled endpoint that drops
// packets: a listening socket with a backlog of 0 that never accepts,
// its accept queue filled first, after which the kernel drops further
// SYNs and a connect waits for an answer that never comes. It fails the
// test when the kernel does answer (a refusal, or a connection taken
// into a queue that should be full). The socket closes at cleanup.
func BlackHole(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("black hole: socket: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("black hole: bind: %v", err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatalf("black hole: listen: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("black hole: getsockname: %v", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		t.Fatalf("black hole: getsockname gave %T", sa)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(in4.Port))

	// Fill the accept queue: the connects that complete are held open
	// until cleanup. The first that does not complete is the proof that
	// the hole swallows SYNs.
	const most = 8
	for i := 0; ; i++ {
		if i == most {
			t.Fatalf("black hole %s: %d connects completed against a backlog of 0 that is never accepted; this kernel does not drop SYNs on a full accept queue", addr, most)
		}
		conn, err := net.DialTimeout("tcp", addr, holeCheck)
		if err == nil {
			t.Cleanup(func() { _ = conn.Close() })
			continue
		}
		if isTimeout(err) {
			break
		}
		t.Fatalf("black hole %s: the kernel answered a connect that should hang: %v", addr, err)
	}
	return addr
}

// holeCheck is how long a connect to a black hole must hang to count as
// one: a loopback connect that the kernel takes completes in microseconds.
const holeCheck = 300 * time.Millisecond

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
