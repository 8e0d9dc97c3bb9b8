package smtptest

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"
)

// The server's own accept loop sits between the TCP listener and go-smtp:
// it sees every connection before go-smtp greets it, which is where a
// connection is counted, recorded, refused with a scripted greeting or held
// unanswered (hang mode).

// wireConn is one client connection as the server accepted it: closing it
// closes the TCP connection whatever is layered on it (TLS, go-smtp).
type wireConn struct {
	net.Conn
	s    *Server
	wire *bytes.Buffer // nil unless WithWireCapture; guarded by s.mu
	once sync.Once
}

func (c *wireConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.record(b[:n])
	return n, err
}

func (c *wireConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.record(b[:n])
	return n, err
}

func (c *wireConn) record(b []byte) {
	if c.wire == nil || len(b) == 0 {
		return
	}
	c.s.mu.Lock()
	c.wire.Write(b)
	c.s.mu.Unlock()
}

func (c *wireConn) Close() error {
	c.once.Do(func() {
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
	})
	return c.Conn.Close()
}

// track counts and registers a freshly accepted connection.
func (s *Server) track(c net.Conn) *wireConn {
	wc := &wireConn{Conn: c, s: s}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.captureWire {
		wc.wire = &bytes.Buffer{}
		s.wires = append(s.wires, wc.wire)
	}
	s.accepted++
	s.conns[wc] = struct{}{}
	s.peak = max(s.peak, len(s.conns))
	return wc
}

// acceptLoop accepts connections until the TCP listener closes and decides
// what each gets: a scripted greeting and the door, silence, or go-smtp.
func (s *Server) acceptLoop() {
	defer close(s.loopDone)
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		wc := s.track(c)
		s.mu.Lock()
		greet, hung := s.fail[StepGreeting], s.hung != nil
		if greet.code == 0 && hung {
			s.held = append(s.held, wc)
		}
		s.mu.Unlock()
		switch {
		case greet.code != 0:
			go s.refuse(wc, greet)
		case hung:
			// Held: no greeting until SetHang(false) or the end.
		default:
			s.handOver(wc)
		}
	}
}

// handOver gives a connection to go-smtp, or closes it when the server is
// closing.
func (s *Server) handOver(c net.Conn) {
	select {
	case s.pending <- c:
	case <-s.stop:
		_ = c.Close()
	}
}

// refuse answers the greeting with a scripted reply and closes, as a server
// that is overloaded or shutting down does (421) or that refuses the client
// outright (554).
func (s *Server) refuse(c net.Conn, r reply) {
	defer c.Close()
	var w net.Conn = c
	if s.tlsConfig != nil {
		tc := tls.Server(c, s.tlsConfig)
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		if tc.Handshake() != nil {
			return
		}
		w = tc
	}
	_, _ = fmt.Fprintf(w, "%d %d.0.0 %s\r\n", r.code, r.code/100, r.msg)
}

// fakeListener is what go-smtp serves: it hands over the connections the
// accept loop lets through.
type fakeListener struct {
	s    *Server
	addr net.Addr
}

func (l fakeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.s.pending:
		return c, nil
	case <-l.s.stop:
		return nil, net.ErrClosed
	}
}

func (l fakeListener) Close() error {
	l.s.stopOnce.Do(func() { close(l.s.stop) })
	return l.s.ln.Close()
}

func (l fakeListener) Addr() net.Addr { return l.addr }
