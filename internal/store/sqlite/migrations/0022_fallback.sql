-- Issue 35, point 5: one event, several channels (see the PostgreSQL
-- migration 0024).
ALTER TABLE notifications ADD COLUMN fallback TEXT NOT NULL DEFAULT '';
ALTER TABLE notifications ADD COLUMN fallback_of INTEGER;
ALTER TABLE notifications ADD COLUMN fallback_next INTEGER;
