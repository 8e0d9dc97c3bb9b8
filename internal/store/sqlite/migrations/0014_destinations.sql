-- Issue 32: see the PostgreSQL migration destinations. The persisted
-- record of the destinations that are not up; a destination with no row is
-- up. since and updated_at are stored as every time here (fixed-width UTC
-- text), so that they compare as the times do.
CREATE TABLE destinations (
    key        TEXT PRIMARY KEY,
    channel    TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('failing', 'disabled')),
    reason     TEXT NOT NULL DEFAULT '',
    since      TEXT NOT NULL,
    updated_at TEXT NOT NULL
);

-- The destination key of each notification, set at create.
ALTER TABLE notifications ADD COLUMN destination TEXT;

-- A destination's pending notifications, counted from their entries alone.
-- The predicate is written as the count writes it, so that SQLite's planner
-- takes the index.
CREATE INDEX notifications_destination_pending_idx ON notifications (destination)
    WHERE status = 'pending';

-- Pending notifications of the channels with one provider get their key;
-- a pending webhook created before this migration is not counted.
UPDATE notifications SET destination = channel
WHERE status = 'pending' AND channel IN ('email', 'telegram') AND destination IS NULL;
