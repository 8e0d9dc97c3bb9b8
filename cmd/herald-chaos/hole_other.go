//go:build !linux

package main

import (
	"errors"
	"net"
)

// hole is a loopback TCP port the harness can turn into a black hole; it
// is built on Linux's handling of a full accept queue (SYNs dropped), so
// elsewhere it listens but cannot swallow.
type hole struct{ addr string }

func listenHole() (*hole, net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	return &hole{addr: ln.Addr().String()}, ln, nil
}

var errNoHole = errors.New("black hole: needs Linux (a full accept queue that drops SYNs)")

func (h *hole) swallow(net.Listener) (int, error) { return 0, errNoHole }
func (h *hole) open() (net.Listener, error)       { return nil, errNoHole }
func (h *hole) close()                            {}
