package smtp_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/mail"
	"github.com/heraldhq/herald/internal/sender/smtp"
	"github.com/heraldhq/herald/internal/testkit/smtptest"
)

// outcome is how the worker reads a Send's error.
type outcome string

const (
	permanent outcome = "permanent"   // dead-letter now
	retry     outcome = "retry"       // retry later, an attempt spent
	down      outcome = "sender down" // no attempt spent: back off, probe
	throttled outcome = "throttled"   // no attempt spent: slow down
)

// outcomeOf reads err as the worker does, and fails when err carries more
// than one mark: the worker could not tell what it means.
func outcomeOf(t *testing.T, err error) outcome {
	t.Helper()
	require.Error(t, err)
	var marks []outcome
	if notify.IsPermanent(err) {
		marks = append(marks, permanent)
	}
	if notify.IsSenderDown(err) {
		marks = append(marks, down)
	}
	if after, ok := notify.IsThrottled(err); ok {
		require.Zero(t, after, "SMTP names no wait: %v", err)
		marks = append(marks, throttled)
	}
	require.LessOrEqual(t, len(marks), 1, "marked %v: %v", marks, err)
	if len(marks) == 0 {
		return retry
	}
	return marks[0]
}

// Each reply is classified by where it came, against the real server:
// this message's MAIL, RCPT or DATA (5xx permanent, 4xx retry), the
// session before it (sender down), or a 421 anywhere (throttled).
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
		{"550 on RCPT", smtptest.StepRcpt, 550, permanent, "RCPT TO refused the message for good"},
		{"554 on RCPT", smtptest.StepRcpt, 554, permanent, "RCPT TO refused the message for good"},
		{"451 on RCPT", smtptest.StepRcpt, 451, retry, "RCPT TO refused the message for now (the message's attempt)"},
		{"421 on RCPT", smtptest.StepRcpt, 421, throttled, "421 at RCPT TO: provider throttling"},
		{"550 on MAIL", smtptest.StepMail, 550, permanent, "MAIL FROM refused the message for good"},
		{"452 on MAIL", smtptest.StepMail, 452, retry, "MAIL FROM refused the message for now"},
		{"421 on MAIL", smtptest.StepMail, 421, throttled, "421 at MAIL FROM: provider throttling"},
		{"554 on DATA", smtptest.StepData, 554, permanent, "DATA (final reply) refused the message for good"},
		{"452 on DATA", smtptest.StepData, 452, retry, "DATA (final reply) refused the message for now"},
		{"421 on DATA", smtptest.StepData, 421, throttled, "421 at DATA (final reply): provider throttling"},
		{"421 on greeting", smtptest.StepGreeting, 421, throttled, "421 at the greeting: provider throttling"},
		{"554 on greeting", smtptest.StepGreeting, 554, down, "greeting"},
		{"421 on EHLO", smtptest.StepHello, 421, throttled, "421 at EHLO: provider throttling"},
		{"550 on EHLO", smtptest.StepHello, 550, down, "EHLO"},
		{"535 on AUTH", smtptest.StepAuth, 535, down, "authentication failed: wrong username or password"},
		{"454 on AUTH", smtptest.StepAuth, 454, down, "AUTH"},
		{"421 on AUTH", smtptest.StepAuth, 421, throttled, "421 at AUTH as \"herald\": provider throttling"},
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
			if tc.step < smtptest.StepMail {
				// Probe runs no transaction: it sees what fails before
				// MAIL, a 421 included, as a reason not to resume yet.
				err := s.Probe(context.Background())
				require.Equal(t, down, outcomeOf(t, err), "probe: %v", err)
				require.Contains(t, err.Error(), fmt.Sprint(tc.code))
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

// emailTo is email(id) to another recipient.
func emailTo(id, to string) mail.Email {
	e := email(id)
	e.To = to
	return e
}

// The fault model of issue 16, case by case against the real server: a
// failure before MAIL FROM is the provider's (down, or throttled for a
// 421), one after it is this message's attempt (retry, or permanent for a
// 5xx).
func TestSendFaultModel(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	for _, tc := range []struct {
		name string
		// send sets up the fault, sends once and returns that send's
		// error, checking whatever else the case promises.
		send func(t *testing.T) error
		want outcome
		say  []string
	}{
		{
			name: "421 at the greeting",
			send: func(t *testing.T) error {
				srv := smtptest.Start(t)
				srv.FailAt(smtptest.StepGreeting, 421, "too many connections")
				return newSender(t, smtp.Config{URL: srv.URL()}).Send(context.Background(), email("g"))
			},
			want: throttled,
			say:  []string{"421 at the greeting: provider throttling", "too many connections"},
		},
		{
			name: "421 at MAIL FROM",
			send: func(t *testing.T) error {
				srv := smtptest.Start(t)
				srv.FailAt(smtptest.StepMail, 421, "slow down")
				err := newSender(t, smtp.Config{URL: srv.URL()}).Send(context.Background(), email("m"))
				require.Equal(t, 1, srv.MailCommands(), "a fresh session's 421 is not retried")
				return err
			},
			want: throttled,
			say:  []string{"421 at MAIL FROM: provider throttling", "slow down"},
		},
		{
			name: "451 at RCPT TO",
			send: func(t *testing.T) error {
				srv := smtptest.Start(t)
				srv.Fail(451, "try later")
				return newSender(t, smtp.Config{URL: srv.URL()}).Send(context.Background(), email("r"))
			},
			want: retry,
			say:  []string{"RCPT TO refused the message for now", "451"},
		},
		{
			name: "550 at RCPT TO",
			send: func(t *testing.T) error {
				srv := smtptest.Start(t)
				srv.Fail(550, "no such user")
				return newSender(t, smtp.Config{URL: srv.URL()}).Send(context.Background(), email("r"))
			},
			want: permanent,
			say:  []string{"RCPT TO refused the message for good", "550"},
		},
		{
			// A server that drops the connection on one message: that
			// message's attempt each time, which runs out, while the
			// others go through on the same sender.
			name: "connection dropped after DATA",
			send: func(t *testing.T) error {
				srv := smtptest.Start(t)
				srv.DropAfterData(func(rcpt string) bool { return rcpt == "bad@example.org" })
				s := newSender(t, smtp.Config{URL: srv.URL(), MaxIdle: 1})
				err := s.Send(context.Background(), emailTo("bad", "Bad <bad@example.org>"))
				require.Equal(t, 1, srv.Drops())
				require.NoError(t, s.Send(context.Background(), emailTo("good", "Good <good@example.org>")))
				require.Equal(t, map[string]int{"<good@example.com>": 1}, srv.CountByMessageID())
				again := s.Send(context.Background(), emailTo("bad", "Bad <bad@example.org>"))
				require.Equal(t, retry, outcomeOf(t, again), "the second drop: %v", again)
				require.Equal(t, 2, srv.Drops())
				return err
			},
			want: retry,
			say:  []string{"connection lost after DATA, awaiting the final reply", "(the message's attempt)"},
		},
		{
			name: "dial refused",
			send: func(t *testing.T) error {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
				addr := ln.Addr().String()
				require.NoError(t, ln.Close())
				return newSender(t, smtp.Config{URL: "smtp://" + addr}).Send(context.Background(), email("d"))
			},
			want: down,
			say:  []string{"dial"},
		},
		{
			name: "unresolvable host",
			send: func(t *testing.T) error {
				// .invalid never resolves (RFC 2606).
				return newSender(t, smtp.Config{URL: "smtp://mail.herald.invalid"}).Send(context.Background(), email("n"))
			},
			want: down,
			say:  []string{`the SMTP host "mail.herald.invalid" does not resolve`},
		},
		{
			name: "hang before the greeting",
			send: func(t *testing.T) error {
				srv := smtptest.Start(t)
				srv.SetHang(true)
				start := time.Now()
				err := newSender(t, smtp.Config{URL: srv.URL(), Timeout: timeout}).Send(context.Background(), email("h"))
				require.GreaterOrEqual(t, time.Since(start), timeout)
				require.ErrorIs(t, err, context.DeadlineExceeded)
				return err
			},
			want: down,
			say:  []string{"no answer within the 300ms timeout, before MAIL FROM"},
		},
		{
			name: "hang at DATA",
			send: func(t *testing.T) error {
				srv := smtptest.Start(t, smtptest.WithDataLatency(time.Hour))
				err := newSender(t, smtp.Config{URL: srv.URL(), Timeout: timeout}).Send(context.Background(), email("h"))
				require.ErrorIs(t, err, context.DeadlineExceeded)
				return err
			},
			want: retry,
			say:  []string{"not accepted within the 300ms timeout", "after DATA, awaiting the final reply", "(the message's attempt)"},
		},
		{
			// MAIL FROM went out on a kept session and the server never
			// answered: the hand-over had begun, so the message's attempt.
			name: "hang at MAIL FROM",
			send: func(t *testing.T) error {
				srv := smtptest.Start(t)
				s := newSender(t, smtp.Config{URL: srv.URL(), Timeout: timeout, MaxIdle: 1})
				require.NoError(t, s.Send(context.Background(), email("first")))
				srv.SetHang(true)
				err := s.Send(context.Background(), email("h"))
				require.ErrorIs(t, err, context.DeadlineExceeded)
				return err
			},
			want: retry,
			say:  []string{"not accepted within the 300ms timeout", "after MAIL FROM"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.send(t)
			require.Equal(t, tc.want, outcomeOf(t, err), "error %v", err)
			require.Contains(t, err.Error(), "smtp send")
			for _, say := range tc.say {
				require.Contains(t, err.Error(), say)
			}
		})
	}
}
