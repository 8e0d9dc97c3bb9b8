-- Listing notifications newest first by (created_at, id), optionally for
-- one user or in one status, within a created_at window, resumed from a
-- keyset cursor: the same indexes as the PostgreSQL store, under the same
-- names, each read backwards already in order.
CREATE INDEX notifications_created_idx ON notifications (created_at, id);
CREATE INDEX notifications_user_created_idx ON notifications (user_id, created_at, id);
CREATE INDEX notifications_status_created_idx ON notifications (status, created_at, id);
