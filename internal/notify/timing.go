package notify

import (
	"fmt"
	"time"
)

// QuietHours is a daily window, in a time zone, in which nothing but an
// urgent notification is delivered: a create that falls in it is deferred
// to the window's end. Start and End are clock times, minutes after
// midnight; a window whose start is after its end runs over midnight
// (22:00-08:00).
type QuietHours struct {
	Start, End int
	Location   *time.Location
}

// ParseClock parses a clock time "HH:MM" (00:00 to 23:59) into minutes
// after midnight.
func ParseClock(s string) (int, error) {
	t, err := time.Parse("15:04", s)
	if err != nil || len(s) != 5 {
		return 0, fmt.Errorf("must be a time of day HH:MM, got %q", s)
	}
	return t.Hour()*60 + t.Minute(), nil
}

// Defer returns t, or, when t falls in the quiet window, the window's end:
// the first instant at or after t whose clock in the window's zone is End.
// The window is read on the zone's wall clock, so it follows daylight
// saving changes: 22:00-08:00 ends at 08:00 local on the nights the clocks
// change too (from 23:00: 9 hours, 8 across spring forward, 10 across
// fall back). A wall time that does not exist that night (in the hour the
// clocks skip) ends the window when the clocks reach it.
func (q QuietHours) Defer(t time.Time) time.Time {
	loc := q.Location
	if loc == nil {
		loc = time.UTC
	}
	l := t.In(loc)
	clock := l.Hour()*60 + l.Minute()
	var quiet bool
	endDay := l
	switch {
	case q.Start < q.End:
		quiet = clock >= q.Start && clock < q.End
	case q.Start > q.End:
		quiet = clock >= q.Start || clock < q.End
		if clock >= q.Start {
			endDay = l.AddDate(0, 0, 1)
		}
	}
	if !quiet {
		return t
	}
	y, m, d := endDay.Date()
	end := time.Date(y, m, d, q.End/60, q.End%60, 0, 0, loc)
	if !end.After(t) {
		return t
	}
	return end
}

// CancelAnswer is a cancel's answer for notification n, as read after the
// cancel's compare-and-set changed nothing: n itself when it is canceled
// already (a cancel is idempotent), ErrSendInProgress while it is pending
// (the compare-and-set failed on a live claim), ErrNotCancelable once it
// is settled otherwise.
func CancelAnswer(n Notification) (Notification, error) {
	switch n.Status {
	case StatusCanceled:
		return n, nil
	case StatusPending:
		return n, fmt.Errorf("cancel notification %d: %w", n.ID, ErrSendInProgress)
	}
	return n, fmt.Errorf("cancel notification %d: %w", n.ID, ErrNotCancelable)
}
