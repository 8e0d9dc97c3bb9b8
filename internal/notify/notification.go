package notify

import (
	"strconv"
	"time"
)

// Status is the delivery state of a notification.
type Status string

// The statuses a notification moves through: pending until a worker sends it
// (sent) or gives up on it (failed, i.e. dead-lettered).
const (
	StatusPending Status = "pending"
	StatusSent    Status = "sent"
	StatusFailed  Status = "failed"
)

// ChannelEmail is the only delivery channel so far.
const ChannelEmail = "email"

// Notification is one stored notification.
type Notification struct {
	ID             int64
	UserID         string
	Channel        string
	To             string
	Subject        string
	Body           string
	Status         Status
	Attempts       int
	LastError      string
	IdempotencyKey string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	SentAt         *time.Time
	// FailedAt is when the notification was dead-lettered (nil unless failed).
	FailedAt *time.Time
}

// FormatID renders a notification or message id the way the API and the
// broker show it: decimal.
func FormatID(id int64) string { return strconv.FormatInt(id, 10) }

// ParseID parses an id rendered by FormatID. It reports false for anything
// that is not a positive decimal int64.
func ParseID(s string) (int64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, false
	}
	return id, true
}

// NewNotification is what a store needs to create a notification and its
// outbox event in one transaction.
type NewNotification struct {
	Request CreateRequest
	// IdempotencyKey, when not empty, makes the create idempotent: a second
	// create with the same key and the same request returns the first
	// notification; with a different request it fails with ErrConflict.
	IdempotencyKey string
	// Fault, when not empty, names a debug fault to inject inside the
	// transaction (FaultAfterOutboxInsert). Only the API sets it, and only
	// when HERALD_DEBUG_FAULTS=1.
	Fault string
}

// FaultAfterOutboxInsert makes a create fail after its outbox INSERT, inside
// the transaction, so that neither row survives.
const FaultAfterOutboxInsert = "after-outbox-insert"

// Created is the result of a create.
type Created struct {
	Notification Notification
	// Replayed is true when an earlier create with the same idempotency key
	// is answered again; nothing new was written.
	Replayed bool
}

// DeadLetterFilter selects dead letters (notifications in status failed).
type DeadLetterFilter struct {
	// IDs, when not empty, selects exactly these notifications.
	IDs []int64
	// Since, when not zero, keeps those that failed at or after it.
	Since time.Time
	// ErrorContains, when not empty, keeps those whose last_error contains
	// it (case-insensitive).
	ErrorContains string
	// Limit caps the result (0: no cap).
	Limit int
}

// PruneResult counts what a retention pass deleted.
type PruneResult struct {
	Outbox            int64
	ProcessedMessages int64
}
