package notify

import "strings"

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
}

// NewEmail builds the email of an outgoing notification. from is the
// configured From address; the Message-ID domain is its domain part.
func NewEmail(r Outgoing, from string) Email {
	domain := "localhost"
	if addr, err := ParseAddress(from); err == nil {
		if i := strings.LastIndexByte(addr, '@'); i >= 0 && i+1 < len(addr) {
			domain = addr[i+1:]
		}
	}
	return Email{
		MessageID: "<" + r.NotificationID + "@" + domain + ">",
		From:      from,
		To:        r.To,
		Subject:   r.Subject,
		Body:      r.Body,
	}
}
