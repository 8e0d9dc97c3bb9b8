-- Issue 32, points 1 and 8: the table transport's claim takes due rows in
-- due order, (available_at, id), from this index, and reads no row that is
-- not due: its walk starts at the earliest due time and stops at now, or
-- after the claim's limit. In id order, a row handed back due at once kept
-- its place ahead of every later row and was claimed again first, and each
-- claim read and dropped every retry scheduled for later (50,000 scheduled
-- retries: 50,000 rows read per claim).
--
-- The predicate is outbox_work_unprocessed_idx's (the rows a worker may
-- claim: unprocessed, not a status event). That index stays: the relay of
-- the notifications (with a broker) walks it in id order.
--
-- A claim moves the row's available_at to the end of its lease (as
-- locked_until), so that "due" is available_at <= now for a free row and
-- for one whose lease ran out alike (see claimDue).
--
-- Made on the parent, the index is built on every partition (outbox_legacy
-- included) under a lock that stops writes to the outbox for the
-- migration's transaction: on a large backlog, apply it at a quiet time,
-- as 0005 and 0014. Only unprocessed rows enter it.
CREATE INDEX outbox_work_due_idx ON outbox (available_at, id)
    WHERE processed_at IS NULL AND event_type NOT IN ('notification.sent', 'notification.failed');

-- Each partition's index is named after its partition and the parent's
-- index (<partition>_work_due_idx), as partition maintenance names the
-- indexes of the partitions it makes, so that a plan says what it walks.
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
