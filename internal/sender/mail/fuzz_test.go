package mail_test

import (
	"bytes"
	"encoding/json"
	netmail "net/mail"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/mail"
)

// FuzzValidate checks the validator (notify) against the message the
// renderer makes of what it allows: any request that validates goes through
// the outbox event and renders to a message whose headers are exactly the
// ones herald writes (no injection through to or subject). It lives with the
// renderer because that safety is the pair's, and the domain package
// imports no sender.
func FuzzValidate(f *testing.F) {
	f.Add("u1", "email", "a@example.com", "Hello", "Line one\n.\nLine three")
	f.Add("u1", "email", "Name <a@example.com>", "Привет", "From the start\r\n")
	f.Add("u1", "email", "a@example.com\r\nBcc: x@evil.com", "s", "b")
	f.Add("u1", "email", "a@example.com", "s\nBcc: x@evil.com", "b")
	f.Add("", "sms", "nobody", "", "")
	f.Fuzz(func(t *testing.T, user, channel, to, subject, body string) {
		req := notify.CreateRequest{UserID: user, Channel: channel, To: to, Subject: subject, Body: body}
		if err := req.Validate(notify.EmailOnly()); err != nil {
			return
		}
		payload, err := json.Marshal(notify.Requested{NotificationID: "7", UserID: user, Channel: channel, To: to, Subject: subject, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		r, _, err := notify.Message{ID: 1, Type: notify.EventRequested, Payload: payload}.Decode()
		if err != nil {
			t.Fatalf("a valid request does not decode as an event: %v", err)
		}
		raw := mail.Render(mail.NewEmail(notify.NewOutgoing(r), "herald@example.com"), time.Unix(0, 0))
		m, err := netmail.ReadMessage(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("rendered email does not parse: %v", err)
		}
		for k := range m.Header {
			switch strings.ToLower(k) {
			case "from", "to", "subject", "date", "message-id", "mime-version", "content-type", "content-transfer-encoding":
			default:
				t.Fatalf("header %q injected by to=%q subject=%q", k, to, subject)
			}
		}
		if got := m.Header.Get("Message-Id"); got != "<7@example.com>" {
			t.Fatalf("Message-ID %q", got)
		}
	})
}
