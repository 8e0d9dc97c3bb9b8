-- Issue 32, "destinations have a life": the persisted record of the
-- destinations that are not up (a webhook endpoint's scheme://host:port, or
-- "email"/"telegram" for a channel with one provider). A destination with
-- no row is up. Every worker reads and writes the same rows, so an outage
-- outlives a restart and operators can list and enable destinations
-- (GET /destinations, herald destinations).
CREATE TABLE destinations (
    key        TEXT PRIMARY KEY,
    channel    TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('failing', 'disabled')),
    reason     TEXT NOT NULL DEFAULT '',
    since      TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The destination key of each notification, set at create, so that a
-- destination's pending notifications can be counted (and dead-lettered
-- when it is disabled). Adding a nullable column with no default rewrites
-- nothing.
ALTER TABLE notifications ADD COLUMN destination TEXT;

-- Only pending notifications enter the index: the count of a
-- destination's pending ones reads its entries alone, and a notification
-- leaves the index when it is sent or dead-lettered.
CREATE INDEX notifications_destination_pending_idx ON notifications (destination)
    WHERE status = 'pending';

-- Pending notifications of the channels with one provider get their key
-- (the channel's name); a pending webhook created before this migration
-- keeps a NULL destination (its key is its URL's scheme://host:port as the
-- webhook sender normalises it, not written again in SQL) and is not
-- counted. Only pending rows are touched.
UPDATE notifications SET destination = channel
WHERE status = 'pending' AND channel IN ('email', 'telegram') AND destination IS NULL;
