package faultproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/faultproxy"
)

// echo is a line echo server that counts the connections it holds.
type echo struct {
	ln       net.Listener
	mu       sync.Mutex
	open     int
	accepted int
	wg       sync.WaitGroup
}

func startEcho(t *testing.T) *echo {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	e := &echo{ln: ln}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.open++
			e.accepted++
			e.mu.Unlock()
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				defer func() {
					e.mu.Lock()
					e.open--
					e.mu.Unlock()
				}()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
	})
	return e
}

func (e *echo) counts() (open, accepted int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.open, e.accepted
}

func setup(t *testing.T) (*echo, *faultproxy.Proxy) {
	t.Helper()
	e := startEcho(t)
	p, err := faultproxy.New(e.ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return e, p
}

type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, p *faultproxy.Proxy) *client {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return &client{c: c, r: bufio.NewReader(c)}
}

// roundTrip sends a line and reads the echo within d.
func (c *client) roundTrip(line string, d time.Duration) (string, error) {
	if err := c.c.SetDeadline(time.Now().Add(d)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(c.c, line+"\n"); err != nil {
		return "", err
	}
	got, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return got[:len(got)-1], nil
}

func TestPassForwardsBothWays(t *testing.T) {
	t.Parallel()
	e, p := setup(t)
	c := dial(t, p)
	for _, line := range []string{"one", "two", string(make([]byte, 100<<10))} {
		got, err := c.roundTrip(line, 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, line, got)
	}
	open, _ := e.counts()
	require.Equal(t, 1, open)
	require.Equal(t, 1, p.Open())
}

func TestLatencyDelaysEachDirection(t *testing.T) {
	t.Parallel()
	_, p := setup(t)
	c := dial(t, p)
	_, err := c.roundTrip("warm", 5*time.Second)
	require.NoError(t, err)

	const d = 150 * time.Millisecond
	p.Latency(d)
	start := time.Now()
	got, err := c.roundTrip("slow", 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "slow", got)
	require.GreaterOrEqual(t, time.Since(start), 2*d, "a round trip crosses the proxy twice")
	m, lat := p.Mode()
	require.Equal(t, faultproxy.ModeLatency, m)
	require.Equal(t, d, lat)

	p.Pass()
	start = time.Now()
	_, err = c.roundTrip("fast", 5*time.Second)
	require.NoError(t, err)
	require.Less(t, time.Since(start), d, "back to pass, no delay")
}

func TestResetClosesOpenConnectionsAndKeepsAccepting(t *testing.T) {
	t.Parallel()
	e, p := setup(t)
	a, b := dial(t, p), dial(t, p)
	for _, c := range []*client{a, b} {
		_, err := c.roundTrip("hi", 5*time.Second)
		require.NoError(t, err)
	}
	require.Equal(t, 2, p.Reset())

	for _, c := range []*client{a, b} {
		_, err := c.roundTrip("after reset", 5*time.Second)
		require.Error(t, err)
		require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "the connection must be closed, not hang: %v", err)
	}
	// The server side of each connection was closed as well.
	require.Eventually(t, func() bool {
		open, _ := e.counts()
		return open == 0 && p.Open() == 0
	}, 5*time.Second, 5*time.Millisecond)

	c := dial(t, p)
	got, err := c.roundTrip("again", 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "again", got)
}

func TestBlackholeHoldsUntilPass(t *testing.T) {
	t.Parallel()
	e, p := setup(t)
	old := dial(t, p)
	_, err := old.roundTrip("before", 5*time.Second)
	require.NoError(t, err)

	p.Blackhole()
	_, err = old.roundTrip("held", 300*time.Millisecond)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "nothing may come back through a blackhole")

	// A new connection is accepted, but the target never sees it.
	fresh, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer fresh.Close()
	_, err = io.WriteString(fresh, "queued\n")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return p.Accepted() == 2 }, 5*time.Second, 5*time.Millisecond)
	_, accepted := e.counts()
	require.Equal(t, 1, accepted, "a blackhole must not dial the target")

	p.Pass()
	// The held bytes arrive, in order, on both connections.
	require.NoError(t, old.c.SetDeadline(time.Now().Add(5*time.Second)))
	got, err := old.r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "held\n", got)
	require.NoError(t, fresh.SetDeadline(time.Now().Add(5*time.Second)))
	got, err = bufio.NewReader(fresh).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "queued\n", got)
	_, accepted = e.counts()
	require.Equal(t, 2, accepted)
}

func TestClientCloseClosesUpstream(t *testing.T) {
	t.Parallel()
	e, p := setup(t)
	c := dial(t, p)
	_, err := c.roundTrip("x", 5*time.Second)
	require.NoError(t, err)
	require.NoError(t, c.c.Close())
	require.Eventually(t, func() bool {
		open, _ := e.counts()
		return open == 0 && p.Open() == 0
	}, 5*time.Second, 5*time.Millisecond, "a dead client must not leave a server connection behind")
}

func TestUnreachableTargetClosesClient(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	p, err := faultproxy.New(addr)
	require.NoError(t, err)
	defer p.Close()
	c := dial(t, p)
	_, err = c.roundTrip("x", 5*time.Second)
	require.Error(t, err)
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "the client must see the failure, not hang: %v", err)
}

func TestCloseEndsEverything(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	p, err := faultproxy.New(e.ln.Addr().String())
	require.NoError(t, err)
	c := dial(t, p)
	_, err = c.roundTrip("x", 5*time.Second)
	require.NoError(t, err)
	p.Blackhole()
	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "a second Close does nothing")
	_, err = c.roundTrip("y", 5*time.Second)
	require.Error(t, err)
	_, err = net.Dial("tcp", p.Addr())
	require.Error(t, err, "a closed proxy accepts nothing")
	require.Eventually(t, func() bool {
		open, _ := e.counts()
		return open == 0
	}, 5*time.Second, 5*time.Millisecond)
}

func TestNewRejectsBadTarget(t *testing.T) {
	t.Parallel()
	_, err := faultproxy.New("no-port")
	require.Error(t, err)
}
