-- The stale-copy guard (see the PostgreSQL migration of the same number):
-- next_retry_count is the least retry count a delivery of the message id
-- must carry to be claimed; 0, the value of every row written before, is no
-- mark.
ALTER TABLE processed_messages ADD COLUMN next_retry_count INTEGER NOT NULL DEFAULT 0;
