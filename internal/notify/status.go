package notify

import (
	"encoding/json"
	"fmt"
	"time"
)

// The status events: the recording transaction that settles a notification
// (sent, or failed into the dead letters) writes one of them to the outbox,
// so that other services learn the outcome without polling. They travel
// like notification.requested (relay, broker, at least once, keyed by the
// outbox id), but no herald worker consumes them: on RabbitMQ they go to
// the notifications exchange with their type as routing key, on NATS to
// notifications.status.sent / .failed, on Kafka to the topic
// notifications.status keyed by user_id, on SQS to the queue PREFIX-status;
// and to HERALD_STATUS_WEBHOOK_URL when it is set.
//
// A cancel writes notification.canceled in its own transaction, and a
// claim that finds the notification past its expires_at writes
// notification.expired in the claim's. A create its recipient opted out
// of writes notification.suppressed in the create's.
const (
	EventSent     = "notification.sent"
	EventFailed   = "notification.failed"
	EventCanceled = "notification.canceled"
	EventExpired  = "notification.expired"
	// EventSuppressed is the status event of a notification suppressed at
	// create (StatusSuppressed).
	EventSuppressed = "notification.suppressed"
)

// StatusEventTypes lists the status event types, in a fixed order.
var StatusEventTypes = []string{EventSent, EventFailed, EventCanceled, EventExpired, EventSuppressed}

// IsStatusEvent reports whether typ is a status event type.
func IsStatusEvent(typ string) bool {
	switch typ {
	case EventSent, EventFailed, EventCanceled, EventExpired, EventSuppressed:
		return true
	}
	return false
}

// StatusEvent is the payload of a status event.
type StatusEvent struct {
	NotificationID string `json:"notification_id"`
	UserID         string `json:"user_id"`
	Channel        string `json:"channel"`
	// Status is the notification's status: "sent", "failed", "canceled",
	// "expired" or "suppressed".
	Status string `json:"status"`
	// Attempts is the number of attempts spent, the settling one included.
	Attempts int `json:"attempts"`
	// At is when the notification was settled (sent_at, failed_at, or
	// when it was canceled, found expired or suppressed at create).
	At time.Time `json:"at"`
	// LastError is the reason of the last failure; empty when sent at the
	// first attempt.
	LastError string `json:"last_error"`
}

// StatusEventType returns the status event type for a settled
// notification's status ("sent" or "failed").
func StatusEventType(status Status) (string, error) {
	switch status {
	case StatusSent:
		return EventSent, nil
	case StatusFailed:
		return EventFailed, nil
	case StatusCanceled:
		return EventCanceled, nil
	case StatusExpired:
		return EventExpired, nil
	case StatusSuppressed:
		return EventSuppressed, nil
	}
	return "", fmt.Errorf("no status event for status %q", status)
}

// DecodeStatus decodes a status event's payload.
func DecodeStatus(payload []byte) (StatusEvent, error) {
	var s StatusEvent
	if err := json.Unmarshal(payload, &s); err != nil {
		return StatusEvent{}, fmt.Errorf("decode status event: %w", err)
	}
	if _, ok := ParseID(s.NotificationID); !ok {
		return StatusEvent{}, fmt.Errorf("decode status event: invalid notification_id %q", s.NotificationID)
	}
	return s, nil
}

// StatusPayload encodes the payload of n's status event, settled (sent,
// failed, canceled, expired or suppressed) at at.
func StatusPayload(n Notification, at time.Time) ([]byte, error) {
	b, err := json.Marshal(StatusEvent{
		NotificationID: FormatID(n.ID), UserID: n.UserID, Channel: n.Channel, Status: string(n.Status),
		Attempts: n.Attempts, At: at.UTC(), LastError: n.LastError,
	})
	if err != nil {
		return nil, fmt.Errorf("encode status event: %w", err)
	}
	return b, nil
}
