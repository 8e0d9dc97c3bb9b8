-- Issue 35, point 3: categories and preferences. A notification may carry
-- a category; a user may opt out of a category per channel. A create of a
-- category its user opted out of on its channel is stored suppressed, with
-- its notification.suppressed status event and no notification.requested
-- event, in the create's transaction: no worker ever sees it.
--
-- One row per (user, category, channel) the user chose for; a missing row
-- is allowed. The rows outlive a recipient's record: an opt-out stays
-- honoured after the record is deleted or erased.
CREATE TABLE preferences (
    user_id    TEXT        NOT NULL,
    category   TEXT        NOT NULL,
    channel    TEXT        NOT NULL,
    allowed    BOOLEAN     NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, category, channel)
);

-- Constant default: no row is rewritten.
ALTER TABLE notifications ADD COLUMN category TEXT NOT NULL DEFAULT '';

ALTER TABLE notifications DROP CONSTRAINT IF EXISTS notifications_status_check;
ALTER TABLE notifications ADD CONSTRAINT notifications_status_check
    CHECK (status IN ('pending', 'sent', 'failed', 'canceled', 'expired', 'suppressed')) NOT VALID;
ALTER TABLE notifications VALIDATE CONSTRAINT notifications_status_check;

-- A new status event, notification.suppressed: the partial indexes that
-- tell the work from the status events name every status event type, so
-- they are made again with the five, as in 0019 and 0020. Built on every
-- partition under a lock that stops writes for the migration's
-- transaction: on a large backlog, apply it at a quiet time.
DROP INDEX outbox_work_unprocessed_idx;
DROP INDEX outbox_status_unprocessed_idx;
DROP INDEX outbox_work_due_idx;
CREATE INDEX outbox_work_unprocessed_idx ON outbox (id)
    WHERE processed_at IS NULL AND event_type NOT IN ('notification.sent', 'notification.failed', 'notification.canceled', 'notification.expired', 'notification.suppressed');
CREATE INDEX outbox_status_unprocessed_idx ON outbox (id)
    WHERE processed_at IS NULL AND event_type IN ('notification.sent', 'notification.failed', 'notification.canceled', 'notification.expired', 'notification.suppressed');
CREATE INDEX outbox_work_due_idx ON outbox (priority, available_at, id)
    WHERE processed_at IS NULL AND event_type NOT IN ('notification.sent', 'notification.failed', 'notification.canceled', 'notification.expired', 'notification.suppressed');

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
