package notify

import (
	"encoding/json"
	"fmt"
	"time"
)

// This file holds what every store does the same way when it creates a
// notification, whatever its SQL: the row it returns, the idempotency rule
// and the outbox payload.

// Pending returns the notification that nn creates, as stored under id at
// time at: pending, no attempt yet, created and updated at at.
func (nn NewNotification) Pending(id int64, at time.Time) Notification {
	r := nn.Request
	return Notification{
		ID:              id,
		UserID:          r.UserID,
		Channel:         r.Channel,
		To:              r.To,
		Subject:         r.Subject,
		Body:            r.Body,
		Status:          StatusPending,
		IdempotencyKey:  nn.IdempotencyKey,
		RequestID:       nn.RequestID,
		CreatedAt:       at,
		UpdatedAt:       at,
		SendAt:          utcPtr(r.SendAt),
		ExpiresAt:       utcPtr(r.ExpiresAt),
		Priority:        r.Priority.OrDefault(),
		HTML:            r.HTML,
		Template:        r.Template,
		TemplateVersion: r.TemplateVersion,
		Locale:          r.Locale,
		Digest:          nn.Digest,
		Category:        r.Category,
		Unsubscribe:     r.Unsubscribe,
		Fallback:        nn.Fallback,
		FallbackOf:      nn.FallbackOf,
	}
}

// Suppressed returns the notification that nn creates when its recipient
// opted out of its category: as Pending, but suppressed.
func (nn NewNotification) Suppressed(id int64, at time.Time) Notification {
	n := nn.Pending(id, at)
	n.Status = StatusSuppressed
	return n
}

// utcPtr returns a copy of *t in UTC, nil for nil.
func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// sameTime reports whether a and b are both nil or the same instant to
// the millisecond (every store keeps at least that: MongoDB keeps no
// more).
func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Truncate(time.Millisecond).Equal(b.Truncate(time.Millisecond))
}

// Replay answers nn when its idempotency key is taken already, by stored:
// stored again (Replayed) when it was created from the same request, and
// ErrConflict when the key comes back with a different one. Only the
// request's fields count; stored's state (status, attempts) may have moved
// on since.
func (nn NewNotification) Replay(stored Notification) (Created, error) {
	r := nn.Request
	if nn.Digest != "" || stored.Digest != "" {
		if stored.UserID != r.UserID || stored.Channel != r.Channel || stored.Digest != nn.Digest || stored.Category != r.Category ||
			!sameTime(stored.ExpiresAt, r.ExpiresAt) || stored.Priority.OrDefault() != r.Priority.OrDefault() {
			return Created{}, ErrConflict
		}
		return Created{Notification: stored, Replayed: true}, nil
	}
	if stored.UserID != r.UserID || stored.Channel != r.Channel || stored.To != r.To || stored.Category != r.Category ||
		stored.Subject != r.Subject || stored.Body != r.Body ||
		!sameTime(stored.SendAt, r.SendAt) || !sameTime(stored.ExpiresAt, r.ExpiresAt) ||
		stored.Priority.OrDefault() != r.Priority.OrDefault() {
		return Created{}, ErrConflict
	}
	return Created{Notification: stored, Replayed: true}, nil
}

// Plain reports whether nn is a create with nothing resolved: no recipient
// guard, no template, no HTML part, no category. A store may write a plain create in a
// shared statement that does not know those columns.
func (nn NewNotification) Plain() bool {
	r := nn.Request
	return nn.RecipientRevision == 0 && nn.Digest == "" && r.HTML == "" && r.Template == "" && r.Locale == "" && r.Category == "" && !nn.CheckPreference && r.Unsubscribe == "" &&
		len(nn.Fallback) == 0 && nn.FallbackOf == 0
}

// RequestedPayload encodes the payload of n's notification.requested
// outbox event, written with every create and every redrive.
func RequestedPayload(n Notification) ([]byte, error) {
	b, err := json.Marshal(NewRequested(n))
	if err != nil {
		return nil, fmt.Errorf("encode %s payload: %w", EventRequested, err)
	}
	return b, nil
}
