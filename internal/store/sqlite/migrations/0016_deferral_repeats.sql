-- A deferral is recorded once per outage, not once per probe (see the
-- PostgreSQL migration 0018 for the meaning of each column).
ALTER TABLE delivery_attempts ADD COLUMN deferral TEXT;
ALTER TABLE delivery_attempts ADD COLUMN repeats INTEGER NOT NULL DEFAULT 0;
ALTER TABLE delivery_attempts ADD COLUMN last_at TEXT;
