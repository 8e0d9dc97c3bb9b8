-- Issue 32: see the PostgreSQL migration outbox_due_idx. The table
-- transport's claim takes due rows in due order, (available_at, id), from
-- this index, and reads no row that is not due; a claim moves the row's
-- available_at to the end of its lease, so that a leased row is not due
-- and one whose lease ran out is. The predicate is written as the claim
-- writes it, so that SQLite's planner can take the index.
CREATE INDEX outbox_work_due_idx ON outbox (available_at, id)
    WHERE processed_at IS NULL AND event_type NOT IN ('notification.sent', 'notification.failed');

-- The claim was outbox_work_unprocessed_idx's only reader here (the relay
-- names its types as a parameter, which no partial index answers, and
-- walks outbox_unprocessed_idx); PostgreSQL keeps its own for the
-- notifications relay.
DROP INDEX outbox_work_unprocessed_idx;
