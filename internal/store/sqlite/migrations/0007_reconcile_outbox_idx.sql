-- The reconciler asks, for each pending notification it considers, whether
-- an unprocessed outbox row still carries it: one lookup in this index
-- instead of a walk of the backlog (see the PostgreSQL migration).
CREATE INDEX outbox_notification_idx ON outbox (json_extract(payload, '$.notification_id'));
