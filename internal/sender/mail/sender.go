package mail

import (
	"context"
	"fmt"
	netmail "net/mail"

	"github.com/heraldhq/herald/internal/notify"
)

// EmailSender delivers one email: the SMTP sender and the mbox file.
type EmailSender interface {
	Send(ctx context.Context, e Email) error
}

// Sender is the email channel's sender: it makes the email of an outgoing
// notification (From the configured address, Message-ID
// <NOTIFICATION_ID@DOMAIN> with the From address's domain, the same on
// every attempt; a Unicode recipient domain in its IDNA form) and hands it
// to an EmailSender, which classifies its
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
	e := NewEmail(m, s.from)
	to, err := asciiDomain(e.To)
	if err != nil {
		return notify.Permanent(fmt.Errorf("email: to: %w", err))
	}
	e.To = to
	return s.next.Send(ctx, e)
}

// asciiDomain rewrites an address header value ("Name <a@bücher.de>") with
// its domain in IDNA A-labels ("Name <a@xn--bcher-kva.de>"): a server or
// client without SMTPUTF8 takes only ASCII domains, and the A-label form is
// the same domain for everyone. A value whose domain is ASCII is returned
// unchanged; the local part is never changed (SMTPUTF8 decides whether it
// can be sent).
func asciiDomain(to string) (string, error) {
	a, err := netmail.ParseAddress(to)
	if err != nil {
		return "", err
	}
	ascii, _, err := notify.SMTPAddress(a.Address)
	if err != nil {
		return "", err
	}
	if ascii == a.Address {
		return to, nil
	}
	a.Address = ascii
	return a.String(), nil
}

// Probe checks the mail server when the EmailSender can (SMTP); one that
// cannot (an mbox file) is taken as up, and the trial send checks it.
func (s *Sender) Probe(ctx context.Context) error {
	if p, ok := s.next.(interface{ Probe(context.Context) error }); ok {
		return p.Probe(ctx)
	}
	return nil
}
