package notify_test

import (
	"testing"

	"github.com/heraldhq/herald/internal/notify"
)

// FuzzDecode feeds arbitrary messages to the event decoder: it must never
// panic, every error must be permanent (a poison message goes to the dead
// letters at once), and whatever it accepts must have a usable
// notification id and the fields every channel has, as text: one-line
// user_id, channel, to and subject, a non-empty body. The checks are
// channel-neutral: a valid event of any channel decodes.
func FuzzDecode(f *testing.F) {
	f.Add("notification.requested", []byte(`{"notification_id":"1","user_id":"u","channel":"email","to":"a@example.com","subject":"s","body":"b"}`))
	f.Add("notification.requested", []byte(`not json`))
	f.Add("other.type", []byte(`{}`))
	f.Add("notification.requested", []byte(`{"notification_id":"0"}`))
	f.Add("notification.requested", []byte(`{"notification_id":"1","user_id":"u","channel":"email","to":"a@example.com\r\nBcc: x@evil","subject":"s","body":"b"}`))
	f.Add("notification.requested", []byte(`{"notification_id":"2","user_id":"u","channel":"webhook","to":"https://example.com/hook","subject":"","body":"{\"a\":1}"}`))
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
		for field, v := range map[string]string{"user_id": r.UserID, "channel": r.Channel, "to": r.To} {
			if err := notify.CheckText(field, v, notify.MaxBodyLen); err != nil {
				t.Fatalf("accepted an invalid %s: %v", field, err)
			}
		}
		if r.Subject != "" {
			if err := notify.CheckText("subject", r.Subject, notify.MaxSubjectLen); err != nil {
				t.Fatalf("accepted an invalid subject: %v", err)
			}
		}
		if err := notify.CheckBody(r.Body); err != nil {
			t.Fatalf("accepted an invalid body: %v", err)
		}
	})
}
