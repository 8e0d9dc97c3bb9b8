package notify

import (
	"encoding/json"
	"fmt"
)

// MaxChannels bounds a create's fallback list (channels): one channel
// for each herald has, with room for a channel added later.
const MaxChannels = 5

// Hop is one later channel of a create's fallback list (channels, issue
// 35 point 5), resolved at create like the first: its address from the
// recipient, its content rendered from the template's variant for its
// channel. A store keeps the hops after a notification with it
// (Notification.Fallback) and, in the transaction that dead-letters the
// notification, creates the first of them as a notification of its own
// (NextHop), linked to the first of the chain (FallbackOf).
type Hop struct {
	Channel         string `json:"channel"`
	To              string `json:"to"`
	Subject         string `json:"subject,omitempty"`
	Body            string `json:"body"`
	HTML            string `json:"html,omitempty"`
	Template        string `json:"template,omitempty"`
	TemplateVersion int    `json:"template_version,omitempty"`
	Locale          string `json:"locale,omitempty"`
	Unsubscribe     string `json:"unsubscribe,omitempty"`
	Destination     string `json:"destination,omitempty"`
	// CheckPreference: the hop's create reads its recipient's preference
	// for the category on its channel (NewNotification.CheckPreference),
	// when it is made: an opt-out since the first create suppresses it.
	CheckPreference bool `json:"check_preference,omitempty"`
}

// HopOf is the hop that a resolved create nn would be, as a later
// channel of another create's fallback list.
func HopOf(nn NewNotification) Hop {
	r := nn.Request
	return Hop{Channel: r.Channel, To: r.To, Subject: r.Subject, Body: r.Body, HTML: r.HTML,
		Template: r.Template, TemplateVersion: r.TemplateVersion, Locale: r.Locale,
		Unsubscribe: r.Unsubscribe, Destination: nn.Destination, CheckPreference: nn.CheckPreference}
}

// EncodeHops is hops as a store keeps them: a JSON array, "" for none.
func EncodeHops(hops []Hop) (string, error) {
	if len(hops) == 0 {
		return "", nil
	}
	b, err := json.Marshal(hops)
	if err != nil {
		return "", fmt.Errorf("encode fallback: %w", err)
	}
	return string(b), nil
}

// DecodeHops reads what EncodeHops wrote.
func DecodeHops(s string) ([]Hop, error) {
	if s == "" {
		return nil, nil
	}
	var hops []Hop
	if err := json.Unmarshal([]byte(s), &hops); err != nil {
		return nil, fmt.Errorf("decode fallback: %w", err)
	}
	return hops, nil
}

// HopChannels lists the hops' channels, in order.
func HopChannels(hops []Hop) []string {
	if len(hops) == 0 {
		return nil
	}
	out := make([]string, len(hops))
	for i, h := range hops {
		out[i] = h.Channel
	}
	return out
}

// NextHop is the create of the first of n's fallback hops, made when n
// is dead-lettered: the hop's channel, address and content, n's user,
// category, priority and expiry, due at once, with the hops after it
// as its own fallback, and linked to the first notification of the
// chain. It reports false when n has no hop left.
func (n Notification) NextHop() (NewNotification, bool) {
	if len(n.Fallback) == 0 {
		return NewNotification{}, false
	}
	h := n.Fallback[0]
	first := n.FallbackOf
	if first == 0 {
		first = n.ID
	}
	return NewNotification{
		Request: CreateRequest{UserID: n.UserID, Channel: h.Channel, To: h.To, Subject: h.Subject, Body: h.Body,
			ExpiresAt: n.ExpiresAt, Priority: n.Priority, HTML: h.HTML, Template: h.Template,
			TemplateVersion: h.TemplateVersion, Locale: h.Locale, Category: n.Category, Unsubscribe: h.Unsubscribe},
		Destination:     h.Destination,
		CheckPreference: h.CheckPreference,
		Fallback:        n.Fallback[1:],
		FallbackOf:      first,
	}, true
}
