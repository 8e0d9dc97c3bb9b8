-- See the PostgreSQL migration of the same number.
ALTER TABLE notifications ADD COLUMN retry_due_at TEXT;

CREATE INDEX notifications_pending_idx ON notifications (updated_at, id)
    WHERE status = 'pending';
