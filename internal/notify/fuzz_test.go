package notify_test

import (
	"testing"

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
