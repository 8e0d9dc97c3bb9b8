package notify

import (
	"slices"
	"strconv"
	"strings"
)

// ChannelSpec is what the domain knows of one channel: its request
// validation, and how its request's fields read. A channel package exports
// its Validate; cmd/herald registers it under the channel's name.
type ChannelSpec struct {
	// Validate checks the channel's own fields (to, subject, body) of a
	// request whose common fields passed, and returns a *FieldError naming
	// the first offending one. It is pure.
	Validate func(CreateRequest) error
	// JSONBody: the body may be any JSON value; one given as another value
	// than a string is held as its compact JSON text (webhook).
	JSONBody bool
	// Subject: the channel has a subject (email). A channel without one
	// stores an empty subject.
	Subject bool
	// To says what the channel's to is, for people ("an email address",
	// "an https URL").
	To string
	// Destination, when set, names the destination key (see
	// Destination.Key) a valid request's to is sent to: a webhook URL's
	// scheme://host:port, or the channel's name for a channel with one
	// provider. Nil: the notification is stored with no destination.
	Destination func(to string) string
	// RecipientField is the JSON field of the API's recipient (PUT
	// /recipients/{user_id}) that holds the channel's address ("email",
	// "telegram_chat_id", "webhook_url"): a create on the channel without
	// a to reads it. "": a recipient has no address for the channel.
	RecipientField string
}

// DestinationOf returns the destination key of a valid request r under
// cs, or "" when its channel names none.
func (cs Channels) DestinationOf(r CreateRequest) string {
	spec, ok := cs[r.Channel]
	if !ok || spec.Destination == nil {
		return ""
	}
	return spec.Destination(r.To)
}

// ChannelDestination is a ChannelSpec.Destination for a channel with one
// provider: every notification of it goes to the destination keyed by the
// channel's name.
func ChannelDestination(channel string) func(to string) string {
	return func(string) string { return channel }
}

// Channels are the channels a process knows, by name.
type Channels map[string]ChannelSpec

// EmailSpec is the email channel: to an RFC 5322 address, a subject, a
// text body.
var EmailSpec = ChannelSpec{Validate: ValidateEmail, Subject: true, To: "an email address", Destination: ChannelDestination(ChannelEmail),
	RecipientField: "email"}

// EmailOnly is the set of channels that holds email alone.
func EmailOnly() Channels { return Channels{ChannelEmail: EmailSpec} }

// Names returns the channel names, sorted.
func (cs Channels) Names() []string {
	names := make([]string, 0, len(cs))
	for n := range cs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// RecipientField is one channel's address field of a recipient.
type RecipientField struct {
	// Channel is the channel's name, the key of Recipient.Addresses.
	Channel string
	// Field is the JSON field (ChannelSpec.RecipientField).
	Field string
}

// RecipientFields are the address fields of the channels of cs that have
// one, in channel name order: the fields a recipient shows between its
// user_id and its locale ("email", "telegram_chat_id", "webhook_url").
func (cs Channels) RecipientFields() []RecipientField {
	var out []RecipientField
	for _, n := range cs.Names() {
		if f := cs[n].RecipientField; f != "" {
			out = append(out, RecipientField{Channel: n, Field: f})
		}
	}
	return out
}

// MustBe says which names a channel must be: `must be "email"`, `must
// be one of "email", "webhook"`.
func (cs Channels) MustBe() string {
	names := cs.Names()
	for i, n := range names {
		names[i] = strconv.Quote(n)
	}
	if len(names) == 1 {
		return "must be " + names[0]
	}
	return "must be one of " + strings.Join(names, ", ")
}
