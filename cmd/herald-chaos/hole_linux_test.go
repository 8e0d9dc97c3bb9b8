//go:build linux

package main

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A swallowing port takes no connect (none completes, none is refused);
// opened again, it serves, and the connects that waited complete.
func TestHole(t *testing.T) {
	hl, ln, err := listenHole()
	require.NoError(t, err)
	defer hl.close()
	serve := func(ln net.Listener) {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hi"))
			_ = c.Close()
		}
	}
	go serve(ln)
	greet := func(d time.Duration) error {
		c, err := net.DialTimeout("tcp", hl.addr, d)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c)
		if err == nil && string(b) != "hi" {
			t.Fatalf("got %q", b)
		}
		return err
	}
	require.NoError(t, greet(5*time.Second))

	caught, err := hl.swallow(ln)
	require.NoError(t, err)
	require.Zero(t, caught)
	for range 3 {
		err := greet(500 * time.Millisecond)
		require.Error(t, err)
		require.True(t, isTimeout(err), "a connect to the hole hangs, it is not refused: %v", err)
	}
	// A connect under way as the hole opens completes on its SYN's
	// retransmission.
	waiting := make(chan error, 1)
	go func() { waiting <- greet(10 * time.Second) }()

	ln, err = hl.open()
	require.NoError(t, err)
	go serve(ln)
	defer ln.Close()
	require.NoError(t, greet(5*time.Second))
	require.NoError(t, <-waiting)
}

// The SMTP front forwards to its target; down, it cuts the sessions open
// through it and takes no connect; up, it forwards again.
func TestSMTPFront(t *testing.T) {
	target, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer target.Close()
	go func() {
		for {
			c, err := target.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	f, err := startSMTPFront(target.Addr().String())
	require.NoError(t, err)
	defer f.close()
	echo := func(c net.Conn) error {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		b := make([]byte, 4)
		_, err := io.ReadFull(c, b)
		return err
	}
	open, err := net.DialTimeout("tcp", f.addr(), 5*time.Second)
	require.NoError(t, err)
	defer open.Close()
	require.NoError(t, echo(open))

	cut, caught, err := f.down()
	require.NoError(t, err)
	require.Equal(t, 1, cut)
	require.Zero(t, caught)
	require.Error(t, echo(open), "the open session is cut")
	_, err = net.DialTimeout("tcp", f.addr(), 500*time.Millisecond)
	require.True(t, isTimeout(err), "a connect hangs: %v", err)

	require.NoError(t, f.up())
	again, err := net.DialTimeout("tcp", f.addr(), 5*time.Second)
	require.NoError(t, err)
	defer again.Close()
	require.NoError(t, echo(again))
}
