package notify

import "errors"

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
