-- Every delivery attempt, in order (see the PostgreSQL migration of the same
-- number for the meaning of each column).
CREATE TABLE delivery_attempts (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    notification_id INTEGER NOT NULL,
    message_id      INTEGER NOT NULL,
    attempt         INTEGER NOT NULL,
    started_at      TEXT    NOT NULL,
    finished_at     TEXT,
    outcome         TEXT    CHECK (outcome IN ('sent', 'retry', 'dead', 'deferred')),
    error           TEXT
) STRICT;

CREATE INDEX delivery_attempts_notification_idx ON delivery_attempts (notification_id, id);
