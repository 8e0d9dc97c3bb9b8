package notify

import (
	"encoding/json"
	"fmt"
	"time"
)

// Recipient is one user's delivery profile (PUT /recipients/{user_id}): where
// each channel reaches them, their language and their time zone. A create
// that names the user and a channel without a to takes the address from
// here, once, at create: the notification keeps the address it was
// accepted with, whatever the recipient becomes.
type Recipient struct {
	UserID string
	// Addresses are where each channel reaches the user, by channel name
	// ("email", "telegram", "webhook"); a missing or "" entry is none. A
	// channel's address is a JSON field of the API's recipient
	// (ChannelSpec.RecipientField); the stores keep the map as it is, so
	// a new channel needs no change of theirs.
	Addresses map[string]string
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

// Address returns the recipient's address for channel, "" when it has
// none.
func (r Recipient) Address(channel string) string { return r.Addresses[channel] }

// CompactAddresses returns addrs without its empty entries, and nil when
// none is left: the addresses as the stores return them.
func CompactAddresses(addrs map[string]string) map[string]string {
	var out map[string]string
	for ch, a := range addrs {
		if a == "" {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(addrs))
		}
		out[ch] = a
	}
	return out
}

// EncodeAddresses is addrs as a JSON object without its empty entries
// ({} for none): how the SQL stores keep a recipient's addresses, in one
// column whatever the channels.
func EncodeAddresses(addrs map[string]string) []byte {
	c := CompactAddresses(addrs)
	if c == nil {
		return []byte("{}")
	}
	b, _ := json.Marshal(c) // a map of strings always encodes
	return b
}

// DecodeAddresses reads addresses as EncodeAddresses wrote them.
func DecodeAddresses(b []byte) (map[string]string, error) {
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode addresses: %w", err)
	}
	return CompactAddresses(m), nil
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
