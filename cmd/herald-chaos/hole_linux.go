//go:build linux

package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// hole is a loopback TCP port that the harness can turn into a black hole
// and back, as a firewall that starts and stops dropping packets does:
// while it swallows, connects to the port never complete (no refusal, no
// answer: the client waits for its own deadline). It is built on Linux's
// handling of a full accept queue, as sendertest.BlackHole is: the
// port's socket stays bound and listening (kept open by a file of the
// harness's own, so that no other socket can take the port meanwhile),
// its backlog shrinks to 0, nobody accepts, and the harness's own connect
// takes the one place left in the queue, after which the kernel drops
// every SYN. The client's SYN retransmits complete once the hole opens.
type hole struct {
	addr string
	// keep holds the listening socket while no listener serves it.
	keep *os.File

	mu sync.Mutex
	// fillers are the harness's connects that fill the accept queue.
	fillers []net.Conn
}

// holeBacklog is the backlog of a port that is not swallowing.
const holeBacklog = 128

// holeCheck is how long a connect to a swallowing port must hang to count
// as swallowed: a loopback connect the kernel takes completes in
// microseconds.
const holeCheck = 300 * time.Millisecond

// listenHole listens on a free loopback port and returns the hole and the
// listener that serves the port until the first swallow.
func listenHole() (*hole, net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("listen: %w", err)
	}
	keep, err := ln.(*net.TCPListener).File()
	if err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("keep the listening socket: %w", err)
	}
	return &hole{addr: ln.Addr().String(), keep: keep}, ln, nil
}

// swallow makes the port a black hole. ln, the listener serving the port,
// is closed (the connections it accepted are the caller's to end). It
// returns how many connects of others were caught in the accept queue in
// the instant between the last accept and the harness's own connect: they
// completed and will get no answer until open.
func (h *hole) swallow(ln net.Listener) (caught int, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	// Shrink the backlog first: the listener still accepts meanwhile.
	if err := h.backlog(0); err != nil {
		return 0, err
	}
	_ = ln.Close()
	// A backlog of 0 leaves one place in the queue.
	const most = 8
	for i := 0; ; i++ {
		if i == most {
			return 0, fmt.Errorf("black hole %s: %d connects completed against a backlog of 0 that nobody accepts: this kernel does not drop SYNs on a full accept queue", h.addr, most)
		}
		c, err := net.DialTimeout("tcp", h.addr, holeCheck)
		if err == nil {
			h.fillers = append(h.fillers, c)
			continue
		}
		if isTimeout(err) {
			break
		}
		return 0, fmt.Errorf("black hole %s: the kernel answered a connect that should hang: %w", h.addr, err)
	}
	return max(0, 1-len(h.fillers)), nil
}

// open ends the black hole and returns a fresh listener for the port: the
// connects waiting in the queue (the harness's own, closed here, and any
// caught) are accepted by it.
func (h *hole) open() (net.Listener, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.backlog(holeBacklog); err != nil {
		return nil, err
	}
	for _, c := range h.fillers {
		_ = c.Close()
	}
	h.fillers = nil
	ln, err := net.FileListener(h.keep)
	if err != nil {
		return nil, fmt.Errorf("listen on %s again: %w", h.addr, err)
	}
	return ln, nil
}

// close releases the port.
func (h *hole) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.fillers {
		_ = c.Close()
	}
	h.fillers = nil
	_ = h.keep.Close()
}

// backlog sets the listening socket's backlog: listen(2) on a socket that
// listens already changes only that.
func (h *hole) backlog(n int) error {
	rc, err := h.keep.SyscallConn()
	if err != nil {
		return fmt.Errorf("black hole %s: %w", h.addr, err)
	}
	var lerr error
	if err := rc.Control(func(fd uintptr) { lerr = syscall.Listen(int(fd), n) }); err != nil {
		return fmt.Errorf("black hole %s: %w", h.addr, err)
	}
	if lerr != nil {
		return fmt.Errorf("black hole %s: listen backlog %d: %w", h.addr, n, lerr)
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
