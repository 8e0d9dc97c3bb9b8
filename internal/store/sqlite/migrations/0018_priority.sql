-- Issue 34, point 5: priority. A notification is high (rank 0), normal
-- (1, every existing row) or bulk (2); its outbox row carries the rank, so
-- that a claim takes the due rows of one rank before any of the next.
ALTER TABLE notifications ADD COLUMN priority INTEGER NOT NULL DEFAULT 1;
ALTER TABLE outbox ADD COLUMN priority INTEGER NOT NULL DEFAULT 1;

-- The due indexes gain the rank ahead of the due order: the claims (the
-- table transport's from outbox_work_due_idx, the relays' from
-- outbox_due_idx) search them with priority IN (0, 1, 2), one range per
-- rank, in rank order and then in due order, without a sort, and still
-- read no row that is not due. The backlog figures (OutboxStats) count
-- the same ranges.
DROP INDEX outbox_work_due_idx;
CREATE INDEX outbox_work_due_idx ON outbox (priority, available_at, id)
    WHERE processed_at IS NULL AND event_type NOT IN ('notification.sent', 'notification.failed', 'notification.canceled', 'notification.expired');
DROP INDEX outbox_due_idx;
CREATE INDEX outbox_due_idx ON outbox (priority, available_at, id) WHERE processed_at IS NULL;
