-- Issue 35, point 4: one-click unsubscribe (see the PostgreSQL migration
-- 0023).
ALTER TABLE notifications ADD COLUMN unsubscribe_url TEXT NOT NULL DEFAULT '';
