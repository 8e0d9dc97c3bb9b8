-- The SQLite mirror of the PostgreSQL schema: same tables, columns and index
-- names. Timestamps are fixed-width UTC text written by the store
-- ('YYYY-MM-DDTHH:MM:SS.ffffffZ'), so that text comparison in SQL is time
-- order. Tables are STRICT so that a wrong type fails loudly instead of being
-- stored as whatever SQLite's affinity makes of it.

-- AUTOINCREMENT, not plain rowid: ids are never reused after rows are pruned,
-- like a PostgreSQL sequence. That matters for the outbox, whose ids are the
-- keys of processed_messages.
CREATE TABLE notifications (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id         TEXT    NOT NULL,
    channel         TEXT    NOT NULL,
    recipient       TEXT    NOT NULL,
    subject         TEXT    NOT NULL,
    body            TEXT    NOT NULL,
    status          TEXT    NOT NULL DEFAULT 'pending'
                            CHECK (status IN ('pending', 'sent', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT,
    idempotency_key TEXT    UNIQUE,
    created_at      TEXT    NOT NULL,
    updated_at      TEXT    NOT NULL,
    sent_at         TEXT,
    failed_at       TEXT
) STRICT;

CREATE TABLE outbox (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    event_type   TEXT    NOT NULL,
    payload      TEXT    NOT NULL CHECK (json_valid(payload)),
    occurred_at  TEXT    NOT NULL,
    processed_at TEXT,
    attempts     INTEGER NOT NULL DEFAULT 0,
    available_at TEXT    NOT NULL,
    locked_until TEXT,
    locked_by    TEXT,
    last_error   TEXT
) STRICT;

-- The backlog: what the relay and the table workers scan, and what the
-- monitor counts. Processed rows drop out of it.
CREATE INDEX outbox_unprocessed_idx ON outbox (id) WHERE processed_at IS NULL;

CREATE TABLE processed_messages (
    message_id   INTEGER PRIMARY KEY,
    processed_at TEXT    NOT NULL
) STRICT;
