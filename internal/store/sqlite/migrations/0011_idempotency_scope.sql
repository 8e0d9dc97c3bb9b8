-- Idempotency keys are scoped to the user and expire (see the PostgreSQL
-- migration of the same number). SQLite cannot drop a column's UNIQUE
-- constraint, so notifications is rebuilt without it, with every column
-- and index it has, and the unique index on (user_id, idempotency_key);
-- NULL keys never conflict. Its AUTOINCREMENT counter carries over, so
-- ids are never reused.
CREATE TABLE notifications_new (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id          TEXT    NOT NULL,
    channel          TEXT    NOT NULL,
    recipient        TEXT    NOT NULL,
    subject          TEXT    NOT NULL,
    body             TEXT    NOT NULL,
    status           TEXT    NOT NULL DEFAULT 'pending'
                             CHECK (status IN ('pending', 'sent', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT,
    idempotency_key  TEXT,
    created_at       TEXT    NOT NULL,
    updated_at       TEXT    NOT NULL,
    sent_at          TEXT,
    failed_at        TEXT,
    claim_attempt_id INTEGER,
    claimed_until    TEXT,
    retry_due_at     TEXT
) STRICT;

INSERT INTO notifications_new (id, user_id, channel, recipient, subject, body, status, attempts,
    last_error, idempotency_key, created_at, updated_at, sent_at, failed_at,
    claim_attempt_id, claimed_until, retry_due_at)
SELECT id, user_id, channel, recipient, subject, body, status, attempts,
    last_error, idempotency_key, created_at, updated_at, sent_at, failed_at,
    claim_attempt_id, claimed_until, retry_due_at
FROM notifications;

-- The copy set the new table's counter to its largest id; the old counter
-- may be past it.
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
