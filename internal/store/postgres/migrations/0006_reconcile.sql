-- The reconciler (guarantee 6) looks for pending notifications that have had
-- no event in flight for HERALD_RECONCILE_AFTER. retry_due_at is when the
-- retry of a notification waiting in a broker's retry queue is due: until
-- then, no event in flight is expected and none is reconciled. The partial
-- index holds only pending notifications, so the scan stays as small as the
-- pending set.
ALTER TABLE notifications ADD COLUMN retry_due_at TIMESTAMPTZ NULL;

CREATE INDEX notifications_pending_idx ON notifications (updated_at, id)
    WHERE status = 'pending';
