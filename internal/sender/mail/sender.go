package mail

import (
	"context"
	"fmt"

	"github.com/heraldhq/herald/internal/notify"
)

// EmailSender delivers one email: the SMTP sender and the mbox file.
type EmailSender interface {
	Send(ctx context.Context, e notify.Email) error
}

// Sender is the email channel's sender: it makes the email of an outgoing
// notification (From the configured address, Message-ID
// <NOTIFICATION_ID@DOMAIN> with the From address's domain, the same on
// every attempt) and hands it to an EmailSender, which classifies its
// failures (notify.Permanent, SenderDown, Throttled).
type Sender struct {
	from string
	next EmailSender
}

// NewSender returns the email channel's sender, sending From from through
// next.
func NewSender(from string, next EmailSender) (*Sender, error) {
	if _, err := notify.ParseAddress(from); err != nil {
		return nil, fmt.Errorf("from address %q: %w", from, err)
	}
	return &Sender{from: from, next: next}, nil
}

// Send sends m as an email. A message the email channel would not have
// accepted (the API validates; a payload could have been altered since) is
// refused as permanent, before any connection.
func (s *Sender) Send(ctx context.Context, m notify.Outgoing) error {
	req := notify.CreateRequest{UserID: m.UserID, Channel: m.Channel, To: m.To, Subject: m.Subject, Body: m.Body}
	if err := notify.ValidateEmail(req); err != nil {
		return notify.Permanent(fmt.Errorf("email: %w", err))
	}
	return s.next.Send(ctx, notify.NewEmail(m, s.from))
}

// Probe checks the mail server when the EmailSender can (SMTP); one that
// cannot (an mbox file) is taken as up, and the trial send checks it.
func (s *Sender) Probe(ctx context.Context) error {
	if p, ok := s.next.(interface{ Probe(context.Context) error }); ok {
		return p.Probe(ctx)
	}
	return nil
}
