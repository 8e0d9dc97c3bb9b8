package smtptest

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strconv"
	"sync"
)

// WithStrictHello makes the server answer a second EHLO or HELO on a
// connection with 503 5.5.1, as strict servers do, instead of starting the
// session over as RFC 5321 allows (and go-smtp does). STARTTLS starts the
// count over: RFC 3207 asks for a new EHLO once TLS is up.
//
// The server sees the commands in clear only: on smtp:// up to STARTTLS,
// the whole session when there is none. After STARTTLS the dialogue is
// inside TLS and no longer watched (every EHLO there is taken as go-smtp
// takes it); with WithTLS (smtps://, TLS from the first byte) New refuses
// the option.
func WithStrictHello() Option {
	return func(s *Server) { s.strictHello = true }
}

// RefusedHellos returns the number of EHLO and HELO commands answered with
// 503 WithStrictHello: a client that greets twice in one session.
func (s *Server) RefusedHellos() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refusedHellos
}

// strictListener hands go-smtp its connections through strictConn.
type strictListener struct {
	net.Listener
	s *Server
}

func (l strictListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &strictConn{Conn: c, s: l.s, in: bufio.NewReader(c)}, nil
}

// What strictConn is reading from the client.
const (
	readCommands = iota // command lines
	readData            // DATA's message, up to the line "."
	readChunk           // a BDAT chunk of chunkLeft bytes
	readRaw             // TLS after STARTTLS: nothing more to watch
)

// strictConn sits between a client and go-smtp and refuses a second hello
// itself. It hands go-smtp one line at a time, so that go-smtp has
// answered every earlier command before a refused hello is answered: the
// replies stay in the order of the commands, pipelined or not.
type strictConn struct {
	net.Conn
	s  *Server
	in *bufio.Reader

	pending []byte // the rest of the line being passed on
	midLine bool   // pending is not the start of a line

	mu         sync.Mutex // the state below; Write may run beside Read
	state      int
	chunkLeft  int64
	hellos     int  // EHLO and HELO taken since the start or STARTTLS
	awaitHello bool // a hello passed on: a 250 takes it
	awaitData  bool // DATA passed on: a 354 starts the message
	awaitTLS   bool // STARTTLS passed on: a 220 starts the handshake
}

func (c *strictConn) Read(b []byte) (int, error) {
	for {
		if len(c.pending) > 0 {
			n := copy(b, c.pending)
			c.pending = c.pending[n:]
			return n, nil
		}
		c.mu.Lock()
		state := c.state
		c.mu.Unlock()
		switch state {
		case readRaw:
			return c.in.Read(b)
		case readChunk:
			c.mu.Lock()
			left := c.chunkLeft
			c.mu.Unlock()
			if int64(len(b)) > left {
				b = b[:left]
			}
			n, err := c.in.Read(b)
			c.mu.Lock()
			if c.chunkLeft -= int64(n); c.chunkLeft == 0 {
				c.state = readCommands
			}
			c.mu.Unlock()
			return n, err
		}
		line, err := c.in.ReadSlice('\n')
		switch {
		case err == bufio.ErrBufferFull:
			// Part of a line longer than the buffer: no command, and not
			// the end of a message.
			c.pending = append(c.pending[:0], line...)
			c.midLine = true
			continue
		case err != nil && len(line) == 0:
			return 0, err
		}
		midLine := c.midLine
		c.midLine = false
		c.pending = append(c.pending[:0], line...)
		if midLine || err != nil {
			continue
		}
		if state == readData {
			if string(bytes.TrimRight(line, "\r\n")) == "." {
				c.mu.Lock()
				c.state = readCommands
				c.mu.Unlock()
			}
			continue
		}
		if c.command(line) {
			continue
		}
		// A refused hello: answered here, never passed on.
		c.pending = c.pending[:0]
		if _, err := io.WriteString(c.Conn, "503 5.5.1 Bad sequence of commands: already greeted (EHLO/HELO once per session)\r\n"); err != nil {
			return 0, err
		}
	}
}

// command notes what the command line changes and reports whether to pass
// it on to go-smtp.
func (c *strictConn) command(line []byte) bool {
	f := bytes.Fields(line)
	if len(f) == 0 {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch string(bytes.ToUpper(f[0])) {
	case "EHLO", "HELO":
		if c.hellos > 0 {
			c.s.mu.Lock()
			c.s.refusedHellos++
			c.s.mu.Unlock()
			return false
		}
		c.awaitHello = true
	case "DATA":
		c.awaitData = true
	case "BDAT":
		if len(f) > 1 {
			if n, err := strconv.ParseInt(string(f[1]), 10, 64); err == nil && n > 0 {
				c.state, c.chunkLeft = readChunk, n
			}
		}
	case "STARTTLS":
		c.awaitTLS = true
	}
	return true
}

// Write passes go-smtp's replies on, watching the one to a hello, to DATA
// and to STARTTLS.
func (c *strictConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	switch {
	case c.awaitHello:
		// A refused hello (EHLO not implemented, say) greets nobody: the
		// client may go on with HELO.
		c.awaitHello = false
		if bytes.HasPrefix(b, []byte("250")) {
			c.hellos++
		}
	case c.awaitData:
		c.awaitData = false
		if bytes.HasPrefix(b, []byte("354")) {
			c.state = readData
		}
	case c.awaitTLS:
		c.awaitTLS = false
		if bytes.HasPrefix(b, []byte("220")) {
			c.state, c.hellos = readRaw, 0
		}
	}
	c.mu.Unlock()
	return c.Conn.Write(b)
}
