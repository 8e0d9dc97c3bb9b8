// Package faultproxy is a TCP proxy that injects network faults between a
// client and a server on loopback: added latency, connection resets and a
// blackhole. The chaos harness puts one in front of PostgreSQL and one in
// front of RabbitMQ, so that herald meets the faults a real network has
// without touching the shared services.
//
// A blackhole holds data instead of dropping it: a real blackhole drops
// packets, TCP retransmits them, and once the path is back the peer sees
// late bytes, not a corrupt stream. Holding them gives the same view.
package faultproxy

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is the proxy's behaviour for the bytes it forwards.
type Mode int

// The modes a Proxy can be in. Reset is an action, not a mode: it leaves the
// mode unchanged.
const (
	// ModePass forwards at once.
	ModePass Mode = iota
	// ModeLatency delays every chunk, in each direction, by the latency.
	ModeLatency
	// ModeBlackhole accepts connections but forwards nothing (and does not
	// dial the target for new ones) until the mode changes.
	ModeBlackhole
)

// String names the mode for logs.
func (m Mode) String() string {
	switch m {
	case ModePass:
		return "pass"
	case ModeLatency:
		return "latency"
	case ModeBlackhole:
		return "blackhole"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// chunkSize is the largest piece read and forwarded at once.
const chunkSize = 32 << 10

// queued bounds the chunks held per direction (latency or blackhole) before
// the reader stops reading, which pushes back on the sender through TCP.
const queued = 256

// dialTimeout bounds the connection to the target.
const dialTimeout = 10 * time.Second

// Proxy forwards TCP connections from its own loopback address to a target.
// Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	mode    Mode
	latency time.Duration
	changed chan struct{} // closed and replaced on every mode change
	conns   map[*link]struct{}
	closed  bool
	total   int

	// fromClients counts the chunks read from clients (see FromClients).
	fromClients atomic.Int64

	wg sync.WaitGroup
}

// New starts a proxy listening on 127.0.0.1 on a free port, forwarding to
// target (host:port), in ModePass. Close stops it.
func New(target string) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("faultproxy target %q: %w", target, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, changed: make(chan struct{}), conns: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's host:port, to give clients instead of the
// target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Pass forwards at once again, releasing what a blackhole held.
func (p *Proxy) Pass() { p.set(ModePass, 0) }

// Latency delays every chunk by d in each direction (so a round trip by
// 2d). Chunks are delayed, not serialized: throughput is not capped.
func (p *Proxy) Latency(d time.Duration) {
	if d <= 0 {
		p.Pass()
		return
	}
	p.set(ModeLatency, d)
}

// Blackhole holds every byte and every new connection until the mode
// changes.
func (p *Proxy) Blackhole() { p.set(ModeBlackhole, 0) }

// Reset closes every open connection, both sides, at once; the proxy keeps
// accepting new ones in its current mode.
func (p *Proxy) Reset() int {
	p.mu.Lock()
	ls := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.close()
	}
	return len(ls)
}

// Mode returns the current mode and latency.
func (p *Proxy) Mode() (Mode, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.latency
}

// Open returns the number of connections open through the proxy now.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Accepted returns the number of connections accepted so far.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

// FromClients returns how many chunks the proxy has read from its clients
// so far, whatever it did with them: a test waits for it to grow to know
// that a request is in the proxy's hands (held by a blackhole, say) before
// it injects the next fault.
func (p *Proxy) FromClients() int64 { return p.fromClients.Load() }

// Close stops accepting, closes every connection and waits for the proxy's
// goroutines to end. Calling it again does nothing.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Reset()
	p.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("faultproxy close: %w", err)
	}
	return nil
}

func (p *Proxy) set(m Mode, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode, p.latency = m, d
	close(p.changed)
	p.changed = make(chan struct{})
}

// state returns the mode, the latency and a channel closed at the next
// change.
func (p *Proxy) state() (Mode, time.Duration, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.latency, p.changed
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient accept error (too many files): back off briefly
			// rather than spin.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		l := &link{p: p, client: c, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.conns[l] = struct{}{}
		p.total++
		p.mu.Unlock()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			l.run()
		}()
	}
}

// link is one proxied connection.
type link struct {
	p      *Proxy
	client net.Conn

	mu       sync.Mutex
	upstream net.Conn
	done     chan struct{}
	once     sync.Once
}

// close ends both sides; the goroutines of the link notice and return.
func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		l.client.Close()
		l.mu.Lock()
		if l.upstream != nil {
			l.upstream.Close()
		}
		l.mu.Unlock()
		l.p.mu.Lock()
		delete(l.p.conns, l)
		l.p.mu.Unlock()
	})
}

// chunk is one read, due for writing at due.
type chunk struct {
	data []byte
	read time.Time
}

func (l *link) run() {
	// The client's bytes are read (and held) even before the target is
	// dialled, so that a blackhole swallows a handshake as a dead network
	// would.
	fromClient := make(chan chunk, queued)
	var wg sync.WaitGroup
	defer func() {
		l.close()
		wg.Wait()
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		l.read(l.client, fromClient)
	}()

	// Dial only once the path is open.
	if !l.waitOpen() {
		return
	}
	up, err := net.DialTimeout("tcp", l.p.target, dialTimeout)
	if err != nil {
		return
	}
	l.mu.Lock()
	select {
	case <-l.done:
		l.mu.Unlock()
		up.Close()
		return
	default:
	}
	l.upstream = up
	l.mu.Unlock()

	fromServer := make(chan chunk, queued)
	wg.Add(3)
	go func() {
		defer wg.Done()
		l.read(up, fromServer)
	}()
	go func() {
		defer wg.Done()
		l.write(up, fromClient)
	}()
	go func() {
		defer wg.Done()
		l.write(l.client, fromServer)
	}()
	<-l.done
}

// waitOpen waits until the proxy is not a blackhole; false when the link
// ended first.
func (l *link) waitOpen() bool {
	for {
		m, _, changed := l.p.state()
		if m != ModeBlackhole {
			return true
		}
		select {
		case <-l.done:
			return false
		case <-changed:
		}
	}
}

// read copies src into out chunk by chunk until src fails; then it ends the
// link, as a proxy must not keep one half of a connection alive.
func (l *link) read(src net.Conn, out chan<- chunk) {
	defer l.close()
	for {
		buf := make([]byte, chunkSize)
		n, err := src.Read(buf)
		if n > 0 {
			if src == l.client {
				l.p.fromClients.Add(1)
			}
			select {
			case out <- chunk{data: buf[:n], read: time.Now()}:
			case <-l.done:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// write forwards chunks to dst, each once the mode lets it through.
func (l *link) write(dst net.Conn, in <-chan chunk) {
	defer l.close()
	for {
		var c chunk
		select {
		case <-l.done:
			return
		case c = <-in:
		}
		if !l.hold(c) {
			return
		}
		if _, err := dst.Write(c.data); err != nil {
			return
		}
	}
}

// hold waits until chunk c may be written: not during a blackhole, and not
// before its latency has passed. False when the link ended first.
func (l *link) hold(c chunk) bool {
	for {
		m, d, changed := l.p.state()
		var t *time.Timer
		var wait <-chan time.Time
		switch m {
		case ModePass:
			return true
		case ModeLatency:
			left := time.Until(c.read.Add(d))
			if left <= 0 {
				return true
			}
			t = time.NewTimer(left)
			wait = t.C
		case ModeBlackhole:
		}
		ok, done := true, false
		select {
		case <-l.done:
			ok, done = false, true
		case <-changed:
		case <-wait:
			done = true
		}
		if t != nil {
			t.Stop()
		}
		if done {
			return ok
		}
	}
}
