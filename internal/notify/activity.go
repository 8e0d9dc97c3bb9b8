package notify

import "time"

// Activity is what happened since a point in time, per minute: the
// console's overview chart. The stores answer it from indexes they already
// have (see their Activity methods), not from a store of metrics.
type Activity struct {
	// Created counts the notifications created in each minute, keyed by the
	// minute's start (UTC).
	Created map[time.Time]int64
	// Delivered counts the notifications sent in each minute (by sent_at),
	// among those created at most ActivityLookback before the window began.
	Delivered map[time.Time]int64
	// Failed is the number of notifications dead-lettered since then.
	Failed int64
}

// ActivityLookback bounds how long before a window's start a notification
// delivered in the window may have been created and still be counted as
// delivered: the count walks the index of sent notifications by creation
// time, so that its cost stays with the window's traffic. A notification
// delivered later than that after its create (a long outage) is left out.
const ActivityLookback = time.Hour
