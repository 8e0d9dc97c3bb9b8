package notify

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors callers branch on.
var (
	// ErrNotFound: no such notification.
	ErrNotFound = errors.New("not found")
	// ErrConflict: an idempotency key was reused with a different request.
	ErrConflict = errors.New("idempotency key reused with a different request")
	// ErrInjectedFault is returned by a create that failed on purpose
	// (NewNotification.Fault).
	ErrInjectedFault = errors.New("injected fault")
	// ErrUnavailable: the store cannot be reached.
	ErrUnavailable = errors.New("store unavailable")
	// ErrNotCancelable: a cancel found the notification settled (sent,
	// failed or expired): there is nothing left to cancel.
	ErrNotCancelable = errors.New("the notification is settled and cannot be canceled")
	// ErrSendInProgress: a cancel found a send of the notification in
	// progress (a worker holds its claim): the send may complete, so the
	// cancel does not pretend to have stopped it.
	ErrSendInProgress = errors.New("a send of the notification is in progress")
	// ErrRecipientChanged: a create's recipient changed (or was deleted)
	// between the create's read of it and its write
	// (NewNotification.RecipientRevision); nothing was written, and the
	// create may be resolved again.
	ErrRecipientChanged = errors.New("the recipient changed during the create")
)

// marked is err carrying the mark M, which errors.As finds anywhere in a
// chain: Permanent and SenderDown are the same wrapper under two marks.
// It adds nothing to err's text.
type marked[M any] struct{ err error }

func (e marked[M]) Error() string { return e.err.Error() }
func (e marked[M]) Unwrap() error { return e.err }

// mark gives err the mark M; mark(nil) is nil.
func mark[M any](err error) error {
	if err == nil {
		return nil
	}
	return marked[M]{err}
}

// hasMark reports whether err, or any error it wraps, carries the mark M.
func hasMark[M any](err error) bool {
	var m marked[M]
	return errors.As(err, &m)
}

// permanent marks an error that retrying cannot cure.
type permanent struct{}

// Permanent marks err as permanent: the delivery goes to the dead letters at
// once instead of being retried. Permanent(nil) is nil.
func Permanent(err error) error { return mark[permanent](err) }

// IsPermanent reports whether err, or any error it wraps, was marked
// Permanent.
func IsPermanent(err error) bool { return hasMark[permanent](err) }

// FieldError is a validation error about one field of a request.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Message) }

// senderDown marks a failure of the mail server itself, not of the
// message: it was unreachable, refused TLS or authentication, or answered
// the greeting or EHLO with 421 or a 5xx.
type senderDown struct{}

// SenderDown marks err as a failure of the mail server itself: the delivery
// costs no retry; the worker stops taking new sends, backs off and probes
// until the server is back. SenderDown(nil) is nil.
func SenderDown(err error) error { return mark[senderDown](err) }

// IsSenderDown reports whether err, or any error it wraps, was marked
// SenderDown.
func IsSenderDown(err error) bool { return hasMark[senderDown](err) }

// throttledError marks a provider's request to slow down: a 421 or 429, a
// Retry-After, a quota. The message is not at fault and spends no attempt.
type throttledError struct {
	err   error
	after time.Duration
}

func (e throttledError) Error() string { return e.err.Error() }
func (e throttledError) Unwrap() error { return e.err }

// Throttled marks err as the provider throttling: the delivery costs no
// attempt; the worker stops taking new sends for at least after (the
// provider's Retry-After; zero when it named none) and for a backoff that
// grows with each throttled try until a real send succeeds. Throttled(nil,
// d) is nil.
func Throttled(err error, after time.Duration) error {
	if err == nil {
		return nil
	}
	return throttledError{err: err, after: max(after, 0)}
}

// IsThrottled reports whether err, or any error it wraps, was marked
// Throttled, and the wait the provider asked for (zero when it named none).
func IsThrottled(err error) (after time.Duration, ok bool) {
	var t throttledError
	if !errors.As(err, &t) {
		return 0, false
	}
	return t.after, true
}

// quiet is an error under a fixed text, with its cause in its chain.
type quiet struct {
	text string
	err  error
}

func (q quiet) Error() string { return q.text }
func (q quiet) Unwrap() error { return q.err }

// Quiet returns err under the fixed text, keeping err in its chain (for
// errors.Is and As). A sender uses it where one failure can read several
// ways (which of several deadlines fired first), so that the reason a gate
// logs and records stays the same from one try to the next.
func Quiet(text string, err error) error { return quiet{text: text, err: err} }
