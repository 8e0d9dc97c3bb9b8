-- Claims held across a send (see the PostgreSQL migration of the same
-- number). SQLite cannot drop a NOT NULL constraint, so processed_messages
-- is rebuilt with processed_at nullable (NULL while a claim holds the
-- message id) and the lease columns.
CREATE TABLE processed_messages_new (
    message_id   INTEGER PRIMARY KEY,
    processed_at TEXT,
    lease_until  TEXT,
    attempt_id   INTEGER
) STRICT;

INSERT INTO processed_messages_new (message_id, processed_at)
SELECT message_id, processed_at FROM processed_messages;

DROP TABLE processed_messages;

ALTER TABLE processed_messages_new RENAME TO processed_messages;

CREATE INDEX processed_messages_processed_idx ON processed_messages (processed_at);

ALTER TABLE notifications ADD COLUMN claim_attempt_id INTEGER;
ALTER TABLE notifications ADD COLUMN claimed_until TEXT;
