-- Issue 17: see the PostgreSQL migration of the same number. The table
-- transport's claim (every row but the status events: the notifications,
-- and a row of an unknown type, which a worker dead-letters as poison)
-- names the types literally, as this index does, so that SQLite's planner
-- takes it and a backlog of status events is never walked by a claim of
-- notifications.
CREATE INDEX outbox_work_unprocessed_idx ON outbox (id)
    WHERE processed_at IS NULL AND event_type NOT IN ('notification.sent', 'notification.failed');
