package notify_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

func TestValidateByChannel(t *testing.T) {
	t.Parallel()
	hook := notify.ChannelSpec{Validate: func(r notify.CreateRequest) error {
		if r.To != "https://example.com/hook" {
			return &notify.FieldError{Field: "to", Message: "must be an https URL"}
		}
		return notify.CheckBody(r.Body)
	}, JSONBody: true}
	two := notify.Channels{notify.ChannelEmail: notify.EmailSpec, "webhook": hook}
	tests := []struct {
		name     string
		channels notify.Channels
		req      notify.CreateRequest
		field    string
		message  string
	}{
		{"email valid", notify.EmailOnly(), notify.CreateRequest{UserID: "u", Channel: "email", To: "a@example.com", Subject: "s", Body: "b"}, "", ""},
		{"email needs a subject", two, notify.CreateRequest{UserID: "u", Channel: "email", To: "a@example.com", Body: "b"}, "subject", "is required"},
		{"email to an URL", two, notify.CreateRequest{UserID: "u", Channel: "email", To: "https://example.com/hook", Subject: "s", Body: "b"}, "to", "must be a single email address"},
		{"webhook: no subject, its own to", two, notify.CreateRequest{UserID: "u", Channel: "webhook", To: "https://example.com/hook", Body: `{"a":1}`}, "", ""},
		{"webhook: the channel's check", two, notify.CreateRequest{UserID: "u", Channel: "webhook", To: "a@example.com", Body: "b"}, "to", "must be an https URL"},
		{"webhook unknown to an email-only process", notify.EmailOnly(), notify.CreateRequest{UserID: "u", Channel: "webhook", To: "https://example.com/hook", Body: "b"}, "channel", `must be "email"`},
		{"unknown channel lists the known", two, notify.CreateRequest{UserID: "u", Channel: "sms", To: "1", Body: "b"}, "channel", `must be one of "email", "webhook"`},
		{"webhook has no subject", two, notify.CreateRequest{UserID: "u", Channel: "webhook", To: "https://example.com/hook", Subject: "s", Body: "b"}, "subject", "must be absent: the webhook channel has no subject"},
		{"common check first", two, notify.CreateRequest{Channel: "sms"}, "user_id", "is required"},
		{"channel required", two, notify.CreateRequest{UserID: "u"}, "channel", "is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.req.Validate(tt.channels)
			if tt.field == "" {
				require.NoError(t, err)
				return
			}
			fe, ok := errors.AsType[*notify.FieldError](err)
			require.True(t, ok, "%v", err)
			require.Equal(t, tt.field, fe.Field)
			require.Equal(t, tt.message, fe.Message)
		})
	}
}

// A valid event of a channel other than email decodes: the decoder's
// checks are channel-neutral, so the worker never dead-letters it as
// poison.
func TestDecodeIsChannelNeutral(t *testing.T) {
	t.Parallel()
	for _, r := range []notify.Requested{
		{NotificationID: "5", UserID: "u", Channel: "webhook", To: "https://example.com/hooks/a-path-longer-than-an-email-address-would-be?q=1", Body: `{"event":"x"}`},
		{NotificationID: "6", UserID: "u", Channel: "telegram", To: "@herald_channel", Body: "text"},
	} {
		p, err := json.Marshal(r)
		require.NoError(t, err)
		got, id, err := notify.Message{ID: 1, Type: notify.EventRequested, Payload: p}.Decode()
		require.NoError(t, err)
		require.Equal(t, r, got)
		require.Equal(t, notify.FormatID(id), r.NotificationID)
	}
	p, err := json.Marshal(notify.Requested{NotificationID: "7", UserID: "u", Channel: "webhook", To: "https://x\r\nEvil: 1", Body: "b"})
	require.NoError(t, err)
	_, _, err = notify.Message{ID: 1, Type: notify.EventRequested, Payload: p}.Decode()
	require.True(t, notify.IsPermanent(err), "a line break in to is refused whatever the channel: %v", err)
}
