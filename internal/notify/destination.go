package notify

import (
	"errors"
	"time"
)

// destinationError scopes a failure to one destination of a channel: a
// webhook endpoint is a provider of its own, and its outage or throttling
// must slow only the deliveries to it, never the channel.
type destinationError struct {
	err error
	key string
}

func (e destinationError) Error() string { return e.err.Error() }
func (e destinationError) Unwrap() error { return e.err }

// ForDestination scopes err to the destination key (e.g. a webhook's
// scheme://host:port): a SenderDown or Throttled mark inside it pauses only
// deliveries to that destination, not the whole channel. A Permanent or
// plain error is unaffected. ForDestination(nil, key) is nil.
func ForDestination(err error, key string) error {
	if err == nil {
		return nil
	}
	return destinationError{err: err, key: key}
}

// DestinationOf returns the destination key err was scoped to with
// ForDestination, and false when it concerns the whole channel.
func DestinationOf(err error) (string, bool) {
	var d destinationError
	if !errors.As(err, &d) {
		return "", false
	}
	return d.key, true
}

// The states of a destination (a webhook endpoint's scheme://host:port, or
// a channel's one provider: the mail server, the Bot API, keyed by the
// channel's name). A destination with no record is up.
const (
	// DestinationUp: sends go (the state of every destination without a
	// record).
	DestinationUp = "up"
	// DestinationFailing: its provider is down or throttling since Since;
	// its deliveries are parked, with no attempt spent.
	DestinationFailing = "failing"
	// DestinationDisabled: it failed for longer than
	// HERALD_DESTINATION_DISABLE_AFTER; its pending notifications are
	// dead-lettered with that reason until an operator enables it.
	DestinationDisabled = "disabled"
)

// Destination is the persisted record of a destination that is not up.
type Destination struct {
	// Key is the destination: a webhook endpoint's scheme://host:port, or
	// the channel's name for a channel with one provider (email,
	// telegram).
	Key string
	// Channel is the channel whose sends go there.
	Channel string
	// State is DestinationFailing or DestinationDisabled.
	State string
	// Reason is the last failure, or why it was disabled.
	Reason string
	// Since is when it began failing (kept across restarts and workers).
	Since time.Time
	// Pending counts the notifications to it still pending (filled by
	// listings only).
	Pending int64
}

// DestinationFilter selects a page of the destination records, by key.
type DestinationFilter struct {
	// State, when not empty, keeps the records in that state
	// (DestinationFailing or DestinationDisabled).
	State string
	// Limit is the most a page holds; it must be at least 1.
	Limit int
	// After, when not empty, resumes a listing: only keys after it are
	// listed.
	After string
}

// DestinationPage is one page of the destination records.
type DestinationPage struct {
	// Items are the records, by key, each with its pending count.
	Items []Destination
	// Next is the key to resume after, empty when the listing is done.
	Next string
}

// CutDestinations makes a page of up to limit+1 records read in key
// order: the extra one, when there, says that the listing goes on.
func CutDestinations(ds []Destination, limit int) DestinationPage {
	if len(ds) <= limit {
		return DestinationPage{Items: ds}
	}
	return DestinationPage{Items: ds[:limit], Next: ds[limit-1].Key}
}

// Waiting is why a pending notification waits: the record of its
// destination (or of its channel's one provider) that is not up.
type Waiting struct {
	// Destination is the key of the record: the notification's
	// destination, or its channel when the whole channel's provider is
	// down.
	Destination string
	// State is DestinationFailing or DestinationDisabled.
	State string
	// Reason is the record's reason: the last failure, or why it was
	// disabled.
	Reason string
	// Since is when the destination began failing.
	Since time.Time
}
