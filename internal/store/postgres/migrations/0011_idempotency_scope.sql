-- Idempotency keys are scoped to the user and expire (issue 21): a key is
-- unique per user_id, not across the table, and a create after the key's
-- window clears it from the old row (see the store's Create). NULL keys
-- never conflict in a unique index.
ALTER TABLE notifications DROP CONSTRAINT IF EXISTS notifications_idempotency_key_key;

CREATE UNIQUE INDEX notifications_user_idempotency_key_uq
    ON notifications (user_id, idempotency_key);
