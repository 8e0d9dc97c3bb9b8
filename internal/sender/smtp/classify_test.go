package smtp_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/smtp"
	"github.com/heraldhq/herald/internal/smtptest"
)

// outcome is how the worker reads a Send's error.
type outcome string

const (
	permanent outcome = "permanent"   // dead-letter now
	retry     outcome = "retry"       // retry later, an attempt spent
	down      outcome = "sender down" // no attempt spent: back off, probe
)

func outcomeOf(t *testing.T, err error) outcome {
	t.Helper()
	require.Error(t, err)
	p, d := notify.IsPermanent(err), notify.IsSenderDown(err)
	require.False(t, p && d, "both permanent and sender down: %v", err)
	switch {
	case p:
		return permanent
	case d:
		return down
	}
	return retry
}

// Each failure is classified by where it happened, against the real server:
// this message's MAIL, RCPT or DATA (5xx permanent, 4xx retry) or the
// server itself (sender down).
func TestSendClassifiesFailures(t *testing.T) {
	t.Parallel()
	ca := smtptest.StartCA(t)
	caFile := ca.WriteFile(t)
	for _, tc := range []struct {
		name string
		step smtptest.Step
		code int
		want outcome
		// say is what the error must say besides the code.
		say string
	}{
		{"550 on RCPT", smtptest.StepRcpt, 550, permanent, "rcpt to"},
		{"554 on RCPT", smtptest.StepRcpt, 554, permanent, "rcpt to"},
		{"451 on RCPT", smtptest.StepRcpt, 451, retry, "rcpt to"},
		{"421 on RCPT", smtptest.StepRcpt, 421, down, "closing"},
		{"550 on MAIL", smtptest.StepMail, 550, permanent, "mail from"},
		{"452 on MAIL", smtptest.StepMail, 452, retry, "mail from"},
		{"421 on MAIL", smtptest.StepMail, 421, down, "closing"},
		{"554 on DATA", smtptest.StepData, 554, permanent, "end data"},
		{"452 on DATA", smtptest.StepData, 452, retry, "end data"},
		{"421 on greeting", smtptest.StepGreeting, 421, down, "greeting"},
		{"554 on greeting", smtptest.StepGreeting, 554, down, "greeting"},
		{"421 on EHLO", smtptest.StepHello, 421, down, "EHLO"},
		{"550 on EHLO", smtptest.StepHello, 550, down, "EHLO"},
		{"535 on AUTH", smtptest.StepAuth, 535, down, "authentication failed: wrong username or password"},
		{"454 on AUTH", smtptest.StepAuth, 454, down, "AUTH"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := smtptest.Start(t, smtptest.WithStartTLS(ca.ServerTLS()), smtptest.WithRequireTLS(), smtptest.WithAuth(user, pass))
			s := newSender(t, smtp.Config{URL: "smtp://" + user + ":" + pass + "@" + srv.Addr(), CAFile: caFile, MaxIdle: 1})

			srv.FailAt(tc.step, tc.code, "scripted for the test")
			err := s.Send(context.Background(), email("c"))
			require.Equal(t, tc.want, outcomeOf(t, err), "error %v", err)
			require.Contains(t, err.Error(), fmt.Sprint(tc.code))
			require.Contains(t, err.Error(), tc.say)
			require.Contains(t, err.Error(), "smtp send")
			require.NotContains(t, err.Error(), pass)
			require.Zero(t, srv.Count())
			if tc.want == down && tc.step < smtptest.StepMail {
				// Probe runs no transaction: it sees what fails before
				// MAIL, not a 421 to a MAIL or RCPT.
				require.True(t, notify.IsSenderDown(s.Probe(context.Background())), "probe while down")
			}

			// Fixed, the same sender delivers, and the probe says so.
			srv.FailAt(tc.step, 0, "")
			require.NoError(t, s.Probe(context.Background()))
			require.NoError(t, s.Send(context.Background(), email("c")))
			require.Equal(t, 1, srv.Count())
		})
	}
}

// The wrong password, set in the URL, is named as such.
func TestSendWrongPassword(t *testing.T) {
	t.Parallel()
	ca := smtptest.StartCA(t)
	srv := smtptest.Start(t, smtptest.WithStartTLS(ca.ServerTLS()), smtptest.WithAuth(user, pass))
	s := newSender(t, smtp.Config{URL: "smtp://" + user + ":wrong-pw@" + srv.Addr(), CAFile: ca.WriteFile(t)})
	err := s.Send(context.Background(), email("w"))
	require.Equal(t, down, outcomeOf(t, err), "error %v", err)
	require.Contains(t, err.Error(), "wrong username or password")
	require.Contains(t, err.Error(), fmt.Sprintf("%q", user))
	require.NotContains(t, err.Error(), "wrong-pw")
	require.Zero(t, srv.MailCommands())

	// No credentials at all against a server that wants them: 530, down.
	anon := newSender(t, smtp.Config{URL: "smtp://" + srv.Addr(), CAFile: ca.WriteFile(t)})
	err = anon.Send(context.Background(), email("anon"))
	require.Equal(t, down, outcomeOf(t, err), "error %v", err)
	require.Contains(t, err.Error(), "authentication")
}

// Greylisting (451 for the first tries of a recipient) is a plain retry.
func TestSendGreylisted(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	srv.Greylist(2)
	s := newSender(t, smtp.Config{URL: srv.URL()})
	for range 2 {
		err := s.Send(context.Background(), email("g"))
		require.Equal(t, retry, outcomeOf(t, err), "error %v", err)
		require.Contains(t, err.Error(), "451")
	}
	require.NoError(t, s.Send(context.Background(), email("g")))
	require.Equal(t, 1, srv.Count())
}

// The server's own failures without a reply: refused dial, hung server,
// connection dropped mid-transaction.
func TestSendServerFailures(t *testing.T) {
	t.Parallel()
	t.Run("dial refused", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		s := newSender(t, smtp.Config{URL: "smtp://" + addr})
		err = s.Send(context.Background(), email("d"))
		require.Equal(t, down, outcomeOf(t, err), "error %v", err)
		require.Contains(t, err.Error(), "dial")
		require.True(t, notify.IsSenderDown(s.Probe(context.Background())))
	})
	t.Run("hung", func(t *testing.T) {
		t.Parallel()
		srv := smtptest.Start(t)
		srv.SetHang(true)
		s := newSender(t, smtp.Config{URL: srv.URL(), Timeout: 300 * time.Millisecond})
		err := s.Send(context.Background(), email("h"))
		require.Equal(t, down, outcomeOf(t, err), "error %v", err)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.True(t, notify.IsSenderDown(s.Probe(context.Background())))
		srv.SetHang(false)
		require.NoError(t, s.Probe(context.Background()))
	})
	// A server that greeted and took the transaction but does not answer
	// its DATA in time did not accept this message: a failure to retry,
	// as a 4xx would be, whichever deadline (the sender's or the caller's)
	// fired first.
	t.Run("hung in DATA", func(t *testing.T) {
		t.Parallel()
		srv := smtptest.Start(t, smtptest.WithDataLatency(time.Hour))
		s := newSender(t, smtp.Config{URL: srv.URL(), Timeout: 300 * time.Millisecond})
		err := s.Send(context.Background(), email("h"))
		require.Equal(t, retry, outcomeOf(t, err), "error %v", err)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		err = s.Send(ctx, email("h2"))
		require.Equal(t, retry, outcomeOf(t, err), "the caller's deadline first: error %v", err)
	})
	// A server that never greets is down, whichever deadline fired first.
	t.Run("hung before the greeting, caller's deadline first", func(t *testing.T) {
		t.Parallel()
		srv := smtptest.Start(t)
		srv.SetHang(true)
		s := newSender(t, smtp.Config{URL: srv.URL(), Timeout: time.Hour})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		err := s.Send(ctx, email("g"))
		require.Equal(t, down, outcomeOf(t, err), "error %v", err)
	})
}
