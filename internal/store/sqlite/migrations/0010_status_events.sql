-- Issue 17: see the PostgreSQL migration of the same number. The table
-- transport's claim names its type literally, as this index does, so that
-- SQLite's planner takes it and a backlog of status events is never
-- walked by a claim of notifications.
CREATE INDEX outbox_requested_unprocessed_idx ON outbox (id)
    WHERE processed_at IS NULL AND event_type = 'notification.requested';
