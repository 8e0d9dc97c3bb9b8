package monitor

import "time"

// transition is what one sample did to the alert.
type transition int

const (
	// steady: the alert state did not change.
	steady transition = iota
	// fired: the backlog has now stayed above the threshold for long enough.
	fired
	// resolved: a firing alert's backlog fell back to or below the threshold.
	resolved
)

// rule is the backlog alert as a pure state machine, so that its timing can
// be tested with a fake clock. Both settings may be zero: the zero value
// fires at the first sample with any backlog.
type rule struct {
	threshold int64
	// hold is how long the value must stay above threshold before firing.
	hold time.Duration

	// above is true while every sample since since was above threshold.
	above bool
	since time.Time
	// firing is true from fired to resolved.
	firing bool
}

// observe feeds one successful sample taken at now. The time above the
// threshold is measured from the first sample above it, so a single spike
// never fires unless hold is zero; any sample at or below the threshold
// starts the count again.
func (r *rule) observe(now time.Time, value int64) transition {
	if value <= r.threshold {
		r.above = false
		if r.firing {
			r.firing = false
			return resolved
		}
		return steady
	}
	if !r.above {
		r.above = true
		r.since = now
	}
	if !r.firing && now.Sub(r.since) >= r.hold {
		r.firing = true
		return fired
	}
	return steady
}
