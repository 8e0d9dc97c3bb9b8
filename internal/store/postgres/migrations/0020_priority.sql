-- Issue 34, point 5: priority. A notification is high (rank 0), normal
-- (1, every existing row) or bulk (2); its outbox row carries the rank, so
-- that a claim takes the due rows of one rank before any of the next.
-- Both columns come with a constant default: no row is rewritten.
ALTER TABLE notifications ADD COLUMN priority SMALLINT NOT NULL DEFAULT 1;
ALTER TABLE outbox ADD COLUMN priority SMALLINT NOT NULL DEFAULT 1;

-- The due index gains the rank ahead of the due order: a claim (the table
-- transport's, the relay of the notifications') walks one range of it per
-- rank, rank = k AND available_at <= now in (available_at, id) order,
-- highest rank first, and still reads no row that is not due. The backlog
-- figures (OutboxStats) count the same ranges and read the first entry of
-- each for the oldest due row. Built on every partition under a lock that
-- stops writes for the migration's transaction: on a large backlog, apply
-- it at a quiet time, as 0014, 0015 and 0019.
DROP INDEX outbox_work_due_idx;
CREATE INDEX outbox_work_due_idx ON outbox (priority, available_at, id)
    WHERE processed_at IS NULL AND event_type NOT IN ('notification.sent', 'notification.failed', 'notification.canceled', 'notification.expired');

-- Each partition's index is named after its partition and the parent's
-- index (<partition>_work_due_idx), as in 0015.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT c.relname AS idx, t.relname AS tbl
        FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        JOIN pg_index x ON x.indexrelid = c.oid
        JOIN pg_class t ON t.oid = x.indrelid
        WHERE i.inhparent = 'outbox_work_due_idx'::regclass
    LOOP
        IF r.idx <> r.tbl || '_work_due_idx' THEN
            EXECUTE format('ALTER INDEX %I RENAME TO %I', r.idx, r.tbl || '_work_due_idx');
        END IF;
    END LOOP;
END
$$;
