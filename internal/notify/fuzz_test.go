package notify_test

import (
	"bytes"
	"encoding/json"
	"net/mail"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// FuzzDecode feeds arbitrary messages to the event decoder: it must never
// panic, every error must be permanent (a poison message goes to the dead
// letters at once), and whatever it accepts must be a valid request with a
// usable notification id.
func FuzzDecode(f *testing.F) {
	f.Add("notification.requested", []byte(`{"notification_id":"1","user_id":"u","channel":"email","to":"a@example.com","subject":"s","body":"b"}`))
	f.Add("notification.requested", []byte(`not json`))
	f.Add("other.type", []byte(`{}`))
	f.Add("notification.requested", []byte(`{"notification_id":"0"}`))
	f.Add("notification.requested", []byte(`{"notification_id":"1","user_id":"u","channel":"email","to":"a@example.com\r\nBcc: x@evil","subject":"s","body":"b"}`))
	f.Fuzz(func(t *testing.T, typ string, payload []byte) {
		r, id, err := notify.Message{ID: 1, Type: typ, Payload: payload}.Decode()
		if err != nil {
			if !notify.IsPermanent(err) {
				t.Fatalf("decode error is not permanent: %v", err)
			}
			return
		}
		if id <= 0 || notify.FormatID(id) != r.NotificationID {
			t.Fatalf("accepted id %d for %q", id, r.NotificationID)
		}
		req := notify.CreateRequest{UserID: r.UserID, Channel: r.Channel, To: r.To, Subject: r.Subject, Body: r.Body}
		if err := req.Validate(); err != nil {
			t.Fatalf("accepted an invalid request: %v", err)
		}
	})
}

// FuzzValidate checks the validator against the email it allows: any
// request that validates renders to a message whose headers are exactly the
// ones herald writes (no injection through to or subject) and whose body
// round-trips.
func FuzzValidate(f *testing.F) {
	f.Add("u1", "email", "a@example.com", "Hello", "Line one\n.\nLine three")
	f.Add("u1", "email", "Name <a@example.com>", "Привет", "From the start\r\n")
	f.Add("u1", "email", "a@example.com\r\nBcc: x@evil.com", "s", "b")
	f.Add("u1", "email", "a@example.com", "s\nBcc: x@evil.com", "b")
	f.Add("", "sms", "nobody", "", "")
	f.Fuzz(func(t *testing.T, user, channel, to, subject, body string) {
		req := notify.CreateRequest{UserID: user, Channel: channel, To: to, Subject: subject, Body: body}
		if err := req.Validate(); err != nil {
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
		raw := notify.NewEmail(r, "herald@example.com").Render(time.Unix(0, 0))
		m, err := mail.ReadMessage(bytes.NewReader(raw))
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

// FuzzDecodeCreateRequest feeds arbitrary bodies to the strict request
// decoder: it never panics, every error is a *DecodeError with one of the
// API's codes, and a body it accepts re-encodes to an equivalent request.
func FuzzDecodeCreateRequest(f *testing.F) {
	f.Add([]byte(`{"user_id":"u1","channel":"email","to":"a@example.com","subject":"s","body":"b"}`))
	f.Add([]byte(`{"to":"a@example.com","TO":"b@example.com"}`))
	f.Add([]byte(`{"to":"a","to":"b"}`))
	f.Add([]byte(`{"subject":"\ud800"}`))
	f.Add([]byte(`{"user_id":1}`))
	f.Add([]byte(`{} {}`))
	f.Add([]byte("\xff"))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, err := notify.DecodeCreateRequest(raw)
		if err != nil {
			de, ok := err.(*notify.DecodeError)
			if !ok {
				t.Fatalf("error is %T, not *DecodeError", err)
			}
			switch de.Code {
			case "invalid_utf8", "invalid_json", "unknown_field", "invalid_field":
			default:
				t.Fatalf("unknown code %q", de.Code)
			}
			return
		}
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		back, err := notify.DecodeCreateRequest(again)
		if err != nil || back != req {
			t.Fatalf("accepted %q but its re-encoding %q decodes to %+v, %v", raw, again, back, err)
		}
	})
}
