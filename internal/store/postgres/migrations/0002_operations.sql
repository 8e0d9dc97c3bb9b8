-- Operations: dead-letter inspection and retention.

-- The dead letters are listed newest first and counted by the backlog
-- monitor; the partial index holds only failed notifications, so it stays as
-- small as the dead-letter list however many notifications were sent.
CREATE INDEX notifications_failed_idx ON notifications (failed_at DESC, id DESC)
    WHERE status = 'failed';

-- Retention deletes processed rows oldest first, in small batches; without
-- these indexes every batch would scan the whole table. Unprocessed outbox
-- rows stay out of the index: retention never touches them.
CREATE INDEX outbox_processed_idx ON outbox (processed_at)
    WHERE processed_at IS NOT NULL;
CREATE INDEX processed_messages_processed_idx ON processed_messages (processed_at);
