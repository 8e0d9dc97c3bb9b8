-- Issue 35, point 4: one-click unsubscribe (RFC 8058). An email with a
-- category carries the signed URL that opts its user out, rendered at
-- create and stored, so that the outbox (and a redrive) holds what is
-- sent. Constant default: no row is rewritten.
ALTER TABLE notifications ADD COLUMN unsubscribe_url TEXT NOT NULL DEFAULT '';
