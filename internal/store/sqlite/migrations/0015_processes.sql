-- Issue 38: see the PostgreSQL migration processes. One row per running
-- herald process, refreshed every few seconds; times are stored as every
-- time here (fixed-width UTC text), senders as JSON text.
CREATE TABLE processes (
    id         TEXT    PRIMARY KEY,
    host       TEXT    NOT NULL,
    pid        INTEGER NOT NULL,
    roles      TEXT    NOT NULL,
    version    TEXT    NOT NULL DEFAULT '',
    started_at TEXT    NOT NULL,
    seen_at    TEXT    NOT NULL,
    senders    TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(senders))
);
