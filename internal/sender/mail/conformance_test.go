package mail_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/mail"
	"github.com/heraldhq/herald/internal/sender/smtp"
	"github.com/heraldhq/herald/internal/testkit/sendertest"
	"github.com/heraldhq/herald/internal/testkit/smtptest"
)

// The email channel (mail.Sender over the real SMTP sender) passes the
// sender conformance suite against a real SMTP server: a refusal after the
// data is permanent, a 4xx to it the message's attempt, a closed port the
// provider down, a 421 to MAIL throttling (SMTP names no wait), a reply
// to DATA that comes after the timeout the message's attempt; the
// Message-ID is the same on every attempt.
func TestConformance(t *testing.T) {
	sendertest.Run(t, sendertest.Harness{
		Start: func(t *testing.T) sendertest.Peer {
			return &smtpPeer{srv: smtptest.Start(t)}
		},
		NoRetryAfter: "an SMTP 421 names no wait",
	})
}

type smtpPeer struct{ srv *smtptest.Server }

func (p *smtpPeer) Set(b sendertest.Behaviour) {
	switch b {
	case sendertest.Accept:
		p.srv.FailAt(smtptest.StepData, 0, "")
	case sendertest.Reject:
		p.srv.FailAt(smtptest.StepData, 554, "5.6.0 message content refused")
	case sendertest.Fail:
		p.srv.FailAt(smtptest.StepData, 451, "4.3.0 try again later")
	case sendertest.Down:
		p.srv.Close()
	case sendertest.Throttle:
		p.srv.FailAt(smtptest.StepMail, 421, "4.7.0 too many messages, slow down")
	case sendertest.Hang:
		p.srv.SetDataLatency(time.Minute) // the test's end closes the server
	}
}

func (p *smtpPeer) Sender(t *testing.T, timeout time.Duration) sendertest.Sender {
	s, err := smtp.New(smtp.Config{URL: p.srv.URL(), Timeout: timeout, MaxSessions: 1, MaxIdle: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	m, err := mail.NewSender("herald@example.com", s)
	require.NoError(t, err)
	return m
}

func (p *smtpPeer) Outgoing(id string) notify.Outgoing {
	return notify.Outgoing{NotificationID: id, UserID: "u1", Channel: notify.ChannelEmail,
		To: "ann@example.com", Subject: "Conformance", Body: "The body of " + id}
}

func (p *smtpPeer) Received() []sendertest.Received {
	var out []sendertest.Received
	for _, m := range p.srv.Received() {
		out = append(out, sendertest.Received{Identity: m.MessageID, Body: string(m.Data)})
	}
	return out
}
