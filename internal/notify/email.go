package notify

import (
	"fmt"
	"strings"

	"golang.org/x/net/idna"
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
		HTML:      r.HTML,
		// Rendered at create and stored: every attempt carries the same.
		Unsubscribe: r.Unsubscribe,
	}
}

// SMTPAddress prepares a bare address (ParseAddress's result) for SMTP. It
// returns the address with its domain in ASCII (a Unicode domain converted
// to IDNA A-labels, "bücher.de" to "xn--bcher-kva.de"; an ASCII domain or a
// domain literal kept as given) and whether its local part is not ASCII:
// such an address can only go to a server that offers SMTPUTF8 (RFC 6531).
// A Unicode domain that IDNA refuses is an error.
func SMTPAddress(addr string) (ascii string, utf8Local bool, err error) {
	at := strings.LastIndexByte(addr, '@')
	if at < 0 {
		return "", false, fmt.Errorf("address %q has no domain", addr)
	}
	local, domain := addr[:at], addr[at+1:]
	utf8Local = !isASCII(local)
	if isASCII(domain) {
		return addr, utf8Local, nil
	}
	d, err := idna.Lookup.ToASCII(domain)
	if err != nil {
		return "", false, fmt.Errorf("domain %q is not a valid internationalized domain name: %v", domain, err)
	}
	return local + "@" + d, utf8Local, nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
