-- Issue 34: when to deliver. A notification may wait for its send_at
-- (shown scheduled while it is ahead; stored pending), stop being worth
-- sending at its expires_at (status expired), or be canceled (status
-- canceled). The columns are NULL for every existing row and have no
-- default: nothing is rewritten.
ALTER TABLE notifications
    ADD COLUMN send_at     TIMESTAMPTZ NULL,
    ADD COLUMN expires_at  TIMESTAMPTZ NULL,
    ADD COLUMN canceled_at TIMESTAMPTZ NULL,
    ADD COLUMN expired_at  TIMESTAMPTZ NULL;

ALTER TABLE notifications DROP CONSTRAINT IF EXISTS notifications_status_check;
ALTER TABLE notifications ADD CONSTRAINT notifications_status_check
    CHECK (status IN ('pending', 'sent', 'failed', 'canceled', 'expired')) NOT VALID;
ALTER TABLE notifications VALIDATE CONSTRAINT notifications_status_check;

-- Two new status events, notification.canceled and notification.expired:
-- the partial indexes that tell the work (what a worker or the relay of
-- the notifications takes) from the status events (the status relay's)
-- name every status event type, so they are made again with the four.
-- On the partitioned outbox each is built on every partition under a
-- lock that stops writes for the migration's transaction: on a large
-- backlog, apply it at a quiet time, as 0014 and 0015.
DROP INDEX outbox_work_unprocessed_idx;
DROP INDEX outbox_status_unprocessed_idx;
DROP INDEX outbox_work_due_idx;
CREATE INDEX outbox_work_unprocessed_idx ON outbox (id)
    WHERE processed_at IS NULL AND event_type NOT IN ('notification.sent', 'notification.failed', 'notification.canceled', 'notification.expired');
CREATE INDEX outbox_status_unprocessed_idx ON outbox (id)
    WHERE processed_at IS NULL AND event_type IN ('notification.sent', 'notification.failed', 'notification.canceled', 'notification.expired');
-- The table transport's claim and, now, the relay of the notifications
-- walk this one in due order: a row's available_at is its notification's
-- send_at (or the create's time), so a row scheduled for later is never
-- read before it is due, and never reaches a broker before then.
CREATE INDEX outbox_work_due_idx ON outbox (available_at, id)
    WHERE processed_at IS NULL AND event_type NOT IN ('notification.sent', 'notification.failed', 'notification.canceled', 'notification.expired');

-- Each partition's indexes are named after its partition and the
-- parent's index (<partition>_<suffix>), as in 0015.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT c.relname AS idx, t.relname AS tbl, substr(p.relname, length('outbox') + 1) AS suffix
        FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        JOIN pg_class p ON p.oid = i.inhparent
        JOIN pg_index x ON x.indexrelid = c.oid
        JOIN pg_class t ON t.oid = x.indrelid
        WHERE i.inhparent IN ('outbox_work_unprocessed_idx'::regclass, 'outbox_status_unprocessed_idx'::regclass,
                              'outbox_work_due_idx'::regclass)
    LOOP
        IF r.idx <> r.tbl || r.suffix THEN
            EXECUTE format('ALTER INDEX %I RENAME TO %I', r.idx, r.tbl || r.suffix);
        END IF;
    END LOOP;
END
$$;
