-- Listing notifications (GET /notifications, herald notifications list):
-- newest first by (created_at, id), optionally for one user or in one
-- status, optionally within a created_at window, resumed from a keyset
-- cursor. Each shape reads one of these indexes backwards, already in order:
-- no sort, and a page costs its own size whatever the table holds. A user
-- and a status together use the user's index and filter the status.
--
-- Built in the migration's transaction, so not CONCURRENTLY: on a large
-- notifications table, apply it at a quiet time (creates wait for the build).
CREATE INDEX notifications_created_idx ON notifications (created_at, id);
CREATE INDEX notifications_user_created_idx ON notifications (user_id, created_at, id);
CREATE INDEX notifications_status_created_idx ON notifications (status, created_at, id);
