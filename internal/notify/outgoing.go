package notify

// Outgoing is one notification for a channel's sender to deliver, whatever
// the channel. Every attempt at the same notification carries the same
// NotificationID: a sender derives from it the identity a receiver uses to
// drop repeats (email: the Message-ID; webhook: the webhook-id header).
//
// A sender classifies its failures with this package's marks: Permanent
// (retrying cannot help: the message goes to the dead letters), SenderDown
// (the provider itself failed: no attempt spent, sends of the channel
// pause), Throttled (the provider asks to slow down, with its Retry-After:
// no attempt spent, sends of the channel pause at least that long). Any
// other error spends one of the message's attempts.
type Outgoing struct {
	NotificationID string
	UserID         string
	Channel        string
	// To is the channel's destination: an email address, a webhook URL,
	// a Telegram chat id.
	To string
	// Subject is empty for a channel that has none.
	Subject string
	Body    string
	// HTML is the email's HTML part ("" for none).
	HTML string
	// Unsubscribe is an email's one-click unsubscribe URL ("" for none).
	Unsubscribe string
}

// NewOutgoing builds the outgoing message of a requested notification.
func NewOutgoing(r Requested) Outgoing {
	return Outgoing{
		NotificationID: r.NotificationID,
		UserID:         r.UserID,
		Channel:        r.Channel,
		To:             r.To,
		Subject:        r.Subject,
		Body:           r.Body,
		HTML:           r.HTML,
		Unsubscribe:    r.Unsubscribe,
	}
}
