package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/smtptest"
)

// A strict mail server (a second EHLO in a session answered 503) takes
// herald's mail: herald serve says EHLO once per session in clear, so the
// email goes out at its first attempt (the old build paused sends, the
// provider taken for down, and recorded no attempt). A reply herald does
// not expect is named, command, code and text, in the ERROR that says why
// sends are paused.
func TestStrictSMTPServer(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t, smtptest.WithStrictHello())
	s := newServed(t, srv, nil)
	r := s.api.create(t, "ann@example.com", nil)
	require.Equal(t, 201, r.Status, r.Body)
	n := waitStatusAPI(t, s.api, r.ID, "sent", 30*time.Second)
	require.Equal(t, 1, n.Attempts)
	require.Zero(t, srv.RefusedHellos())

	srv.FailAt(smtptest.StepHello, 503, "5.5.1 Bad sequence of commands")
	srv.DropConnections() // the kept session would not greet again
	r = s.api.create(t, "bo@example.com", nil)
	require.Equal(t, 201, r.Status, r.Body)
	s.proc.requireLogError("EHLO: SMTP error 503: ")
	s.proc.requireLog("Bad sequence of commands")
	require.Zero(t, s.api.get(t, r.ID).Attempts, "an outage spends no attempt")

	srv.FailAt(smtptest.StepHello, 0, "")
	n = waitStatusAPI(t, s.api, r.ID, "sent", recovery)
	require.Equal(t, 1, n.Attempts)
	require.Equal(t, 2, srv.Count())
}
