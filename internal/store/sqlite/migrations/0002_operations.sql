-- Operations: dead-letter inspection and retention. The same indexes as the
-- PostgreSQL store, under the same names.

-- The dead letters are listed newest first and counted by the backlog
-- monitor; the partial index holds only failed notifications.
CREATE INDEX notifications_failed_idx ON notifications (failed_at DESC, id DESC)
    WHERE status = 'failed';

-- Retention deletes processed rows oldest first, in small batches; without
-- these indexes every batch would scan the whole table.
CREATE INDEX outbox_processed_idx ON outbox (processed_at)
    WHERE processed_at IS NOT NULL;
CREATE INDEX processed_messages_processed_idx ON processed_messages (processed_at);
