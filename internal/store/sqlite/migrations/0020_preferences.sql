-- Issue 35, point 3: categories and preferences (see the PostgreSQL
-- migration 0022). SQLite cannot change a CHECK constraint, so
-- notifications is rebuilt, as in 0017, with every column and index it
-- has, the status check widened to suppressed, and the category column.
-- Its AUTOINCREMENT counter carries over, so ids are never reused.
CREATE TABLE preferences (
    user_id    TEXT    NOT NULL,
    category   TEXT    NOT NULL,
    channel    TEXT    NOT NULL,
    allowed    INTEGER NOT NULL CHECK (allowed IN (0, 1)),
    updated_at TEXT    NOT NULL,
    PRIMARY KEY (user_id, category, channel)
) STRICT;

CREATE TABLE notifications_new (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id          TEXT    NOT NULL,
    channel          TEXT    NOT NULL,
    recipient        TEXT    NOT NULL,
    subject          TEXT    NOT NULL,
    body             TEXT    NOT NULL,
    status           TEXT    NOT NULL DEFAULT 'pending'
                             CHECK (status IN ('pending', 'sent', 'failed', 'canceled', 'expired', 'suppressed')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT,
    idempotency_key  TEXT,
    created_at       TEXT    NOT NULL,
    updated_at       TEXT    NOT NULL,
    sent_at          TEXT,
    failed_at        TEXT,
    claim_attempt_id INTEGER,
    claimed_until    TEXT,
    retry_due_at     TEXT,
    destination      TEXT,
    send_at          TEXT,
    expires_at       TEXT,
    canceled_at      TEXT,
    expired_at       TEXT,
    priority         INTEGER NOT NULL DEFAULT 1,
    html             TEXT    NOT NULL DEFAULT '',
    template         TEXT    NOT NULL DEFAULT '',
    template_version INTEGER NOT NULL DEFAULT 0,
    locale           TEXT    NOT NULL DEFAULT '',
    request_digest   TEXT    NOT NULL DEFAULT '',
    category         TEXT    NOT NULL DEFAULT ''
) STRICT;

INSERT INTO notifications_new (id, user_id, channel, recipient, subject, body, status, attempts,
    last_error, idempotency_key, created_at, updated_at, sent_at, failed_at,
    claim_attempt_id, claimed_until, retry_due_at, destination, send_at, expires_at, canceled_at, expired_at,
    priority, html, template, template_version, locale, request_digest)
SELECT id, user_id, channel, recipient, subject, body, status, attempts,
    last_error, idempotency_key, created_at, updated_at, sent_at, failed_at,
    claim_attempt_id, claimed_until, retry_due_at, destination, send_at, expires_at, canceled_at, expired_at,
    priority, html, template, template_version, locale, request_digest
FROM notifications;

UPDATE sqlite_sequence
SET seq = max(seq, COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'notifications'), 0))
WHERE name = 'notifications_new';

DROP TABLE notifications;

ALTER TABLE notifications_new RENAME TO notifications;

CREATE INDEX notifications_failed_idx ON notifications (failed_at DESC, id DESC)
    WHERE status = 'failed';
CREATE INDEX notifications_created_idx ON notifications (created_at, id);
CREATE INDEX notifications_user_created_idx ON notifications (user_id, created_at, id);
CREATE INDEX notifications_status_created_idx ON notifications (status, created_at, id);
CREATE INDEX notifications_pending_idx ON notifications (updated_at, id)
    WHERE status = 'pending';
CREATE INDEX notifications_channel_created_idx ON notifications (channel, created_at, id);
CREATE UNIQUE INDEX notifications_user_idempotency_key_uq ON notifications (user_id, idempotency_key);
CREATE INDEX notifications_destination_pending_idx ON notifications (destination)
    WHERE status = 'pending';

-- The status event notification.suppressed joins the four: the index of
-- the work, which names them, is made again with the five.
DROP INDEX outbox_work_due_idx;
CREATE INDEX outbox_work_due_idx ON outbox (priority, available_at, id)
    WHERE processed_at IS NULL AND event_type NOT IN ('notification.sent', 'notification.failed', 'notification.canceled', 'notification.expired', 'notification.suppressed');
