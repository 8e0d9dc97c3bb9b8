package consume

import (
	"encoding/json"

	"github.com/heraldhq/herald/internal/notify"
)

// DeadLetterNotification reads the notification id from a dead letter's
// payload, for a redrive that removes the dead letters of the
// notifications it sent again. It is lenient where notify.Message.Decode
// is strict: a dead letter is often a message that could not be
// processed, and only its id matters here.
func DeadLetterNotification(body []byte) (int64, bool) {
	var p struct {
		NotificationID string `json:"notification_id"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return 0, false
	}
	return notify.ParseID(p.NotificationID)
}

// NamesOneOf returns the test a redrive removes dead letters by: whether a
// dead letter's payload names one of notificationIDs (the notifications
// it sent again). A payload that names none is never removed.
func NamesOneOf(notificationIDs []int64) func(body []byte) bool {
	set := make(map[int64]bool, len(notificationIDs))
	for _, id := range notificationIDs {
		set[id] = true
	}
	return func(body []byte) bool {
		id, ok := DeadLetterNotification(body)
		return ok && set[id]
	}
}
