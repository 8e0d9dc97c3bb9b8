package mail

import (
	"github.com/heraldhq/herald/internal/notify"
)

// Email is one message for a sender to deliver. Every attempt at the same
// notification carries the same MessageID, so a repeat is detectable
// downstream.
type Email struct {
	// MessageID is "<NOTIFICATION_ID@DOMAIN>", angle brackets included.
	MessageID string
	From      string
	To        string
	Subject   string
	Body      string
	// HTML, when not empty, is the HTML alternative of Body.
	HTML string
	// Unsubscribe, when not empty, is the one-click unsubscribe URL: the
	// message carries List-Unsubscribe: <Unsubscribe> and
	// List-Unsubscribe-Post: List-Unsubscribe=One-Click (RFC 8058).
	Unsubscribe string
}

// NewEmail builds the email of an outgoing notification. from is the
// configured From address; the Message-ID is notify.MessageID's.
func NewEmail(r notify.Outgoing, from string) Email {
	return Email{
		MessageID: notify.MessageID(r.NotificationID, from),
		From:      from,
		To:        r.To,
		Subject:   r.Subject,
		Body:      r.Body,
		HTML:      r.HTML,
		// Rendered at create and stored: every attempt carries the same.
		Unsubscribe: r.Unsubscribe,
	}
}
