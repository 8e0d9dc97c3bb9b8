package notify

import (
	"encoding/json"
	"time"
)

// Recipient is one user's delivery profile (PUT /recipients/{user_id}): where
// each channel reaches them, their language and their time zone. A create
// that names the user and a channel without a to takes the address from
// here, once, at create: the notification keeps the address it was
// accepted with, whatever the recipient becomes.
type Recipient struct {
	UserID         string
	Email          string
	TelegramChatID string
	WebhookURL     string
	// Locale is a BCP 47 language tag ("de", "pt-BR"); "" is none.
	Locale string
	// TimeZone is an IANA zone name; "" is none.
	TimeZone string
	// Revision counts the recipient's writes: 1 after the first PUT, one
	// more after each. A create that read the recipient at revision r
	// commits only while it is still at r (NewNotification.RecipientRevision).
	Revision  int64
	UpdatedAt time.Time
}

// RecipientFields are a recipient's address fields by channel: the field
// a create without a to reads for that channel.
var RecipientFields = map[string]string{
	ChannelEmail: "email",
	"telegram":   "telegram_chat_id",
	"webhook":    "webhook_url",
}

// Address returns the recipient's address for channel and the name of the
// recipient field it is read from; the address is "" when the recipient
// has none (and the field "" when the channel has no recipient field).
func (r Recipient) Address(channel string) (addr, field string) {
	field = RecipientFields[channel]
	switch channel {
	case ChannelEmail:
		addr = r.Email
	case "telegram":
		addr = r.TelegramChatID
	case "webhook":
		addr = r.WebhookURL
	}
	return addr, field
}

// Erasure says what an erasure of a user's personal data changed (see
// the stores' EraseRecipient).
type Erasure struct {
	// Recipient is true when a recipient record was deleted.
	Recipient bool `json:"recipient"`
	// Notifications counts the notifications of the user anonymised.
	Notifications int64 `json:"notifications"`
	// Events counts the outbox events of those notifications whose
	// payload was anonymised.
	Events int64 `json:"events"`
	// Attempts counts the delivery attempts whose error was cleared.
	Attempts int64 `json:"attempts"`
}

// ErasedPayloadFields are the keys of an outbox event's payload that an
// erasure empties where present: the address, the content and the last
// error (a provider's refusal often quotes the address).
var ErasedPayloadFields = []string{"to", "subject", "body", "html", "last_error"}

// ErasePayload returns payload, a JSON object, with each of
// ErasedPayloadFields it holds set to "", and whether it changed. Keys it
// does not hold are not added: every event type keeps its own shape. A
// payload that is not a JSON object is returned as it is.
func ErasePayload(payload []byte) ([]byte, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(payload, &m); err != nil {
		return payload, false
	}
	changed := false
	for _, k := range ErasedPayloadFields {
		if v, ok := m[k]; ok && string(v) != `""` {
			m[k] = json.RawMessage(`""`)
			changed = true
		}
	}
	if !changed {
		return payload, false
	}
	b, err := json.Marshal(m)
	if err != nil {
		return payload, false
	}
	return b, true
}
