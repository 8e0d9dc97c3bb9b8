package api

import (
	"strings"
	"time"
	// The IANA time zone database travels in the binary: a time_zone must
	// mean the same on every host, a minimal container image included.
	_ "time/tzdata"

	"github.com/heraldhq/herald/internal/notify"
)

// timingBody is the part of a create body that says when to deliver
// (issue 34): send_at and expires_at (RFC 3339), the recipient's quiet
// window (time_zone, an IANA name, and quiet_hours {"start", "end"},
// "HH:MM" on its wall clock), and urgent, which bypasses the window. The
// window is given per create: herald keeps no recipients yet.
type timingBody struct {
	SendAt     *string          `json:"send_at"`
	ExpiresAt  *string          `json:"expires_at"`
	TimeZone   *string          `json:"time_zone"`
	QuietHours *quietHoursField `json:"quiet_hours"`
	Urgent     *bool            `json:"urgent"`
}

type quietHoursField struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

// decode checks the timing fields' shapes and puts them in req; the
// checks against the clock are schedule's.
func (b timingBody) decode(req *notify.CreateRequest) *apiError {
	var err *apiError
	if req.SendAt, err = rfc3339("send_at", b.SendAt); err != nil {
		return err
	}
	if req.ExpiresAt, err = rfc3339("expires_at", b.ExpiresAt); err != nil {
		return err
	}
	if b.Urgent != nil {
		req.Urgent = *b.Urgent
	}
	var loc *time.Location
	if b.TimeZone != nil {
		name := *b.TimeZone
		l, lerr := time.LoadLocation(name)
		// "Local" is the server's zone, not a recipient's; "" is UTC
		// by LoadLocation's rule, which a client never means.
		if lerr != nil || name == "" || name == "Local" || strings.ContainsAny(name, "\\") {
			return invalidField("time_zone", "must be an IANA time zone name such as Europe/Berlin")
		}
		loc = l
	}
	if q := b.QuietHours; q != nil {
		// Without a time_zone the window is read in the recipient's
		// (resolve); a create with neither is refused by checkCreate.
		start, serr := notify.ParseClock(q.Start)
		if serr != nil {
			return invalidField("quiet_hours", "start "+serr.Error())
		}
		end, eerr := notify.ParseClock(q.End)
		if eerr != nil {
			return invalidField("quiet_hours", "end "+eerr.Error())
		}
		if start == end {
			return invalidField("quiet_hours", "start and end must differ")
		}
		req.Quiet = &notify.QuietHours{Start: start, End: end, Location: loc}
	}
	return nil
}

// rfc3339 parses an optional RFC 3339 time field (null: absent).
func rfc3339(field string, v *string) (*time.Time, *apiError) {
	if v == nil {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *v)
	if err != nil {
		return nil, invalidField(field, "must be an RFC 3339 time such as 2026-01-02T15:04:05Z")
	}
	t = t.UTC()
	return &t, nil
}

func invalidField(field, msg string) *apiError {
	return &apiError{Code: "invalid_field", Message: field + " " + msg, Field: field}
}

// errNoQuietZone refuses quiet hours with no zone to read them in.
var errNoQuietZone = invalidField("time_zone", "is required with quiet_hours (the zone their times are in), unless the recipient has one")

// schedule checks a create's times against now and the horizon and
// settles when it is due: a send_at in the past sends now; one more than
// horizon ahead is refused; the quiet window, unless urgent, defers the
// send to its end (req.SendAt becomes that end); expires_at must be in the
// future and after the send time.
func schedule(req *notify.CreateRequest, now time.Time, horizon time.Duration) *apiError {
	if req.SendAt != nil && req.SendAt.Sub(now) > horizon {
		return invalidField("send_at", "must be at most "+horizon.String()+" ahead (HERALD_SCHEDULE_HORIZON)")
	}
	due := now
	if req.SendAt != nil && req.SendAt.After(now) {
		due = *req.SendAt
	}
	if req.Quiet != nil && !req.Urgent {
		if d := req.Quiet.Defer(due); d.After(due) {
			d = d.UTC()
			req.SendAt, due = &d, d
		}
	}
	if x := req.ExpiresAt; x != nil {
		if !x.After(now) {
			return invalidField("expires_at", "must be in the future")
		}
		if !x.After(due) {
			msg := "must be after send_at"
			if req.Quiet != nil && !req.Urgent && req.SendAt != nil && due.Equal(*req.SendAt) {
				msg += " (" + formatTime(due) + ", the end of the quiet hours)"
			}
			return invalidField("expires_at", msg)
		}
	}
	return nil
}
