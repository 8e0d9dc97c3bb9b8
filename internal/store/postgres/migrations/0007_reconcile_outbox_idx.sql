-- The reconciler asks, for each pending notification it considers, whether
-- an unprocessed outbox row still carries it. This index answers that with
-- one lookup instead of a walk of the whole backlog (issue 24: every
-- statement's cost stays with its batch, however large the backlog). It is
-- not partial on purpose: the reconciler's query must not be answerable
-- from outbox_unprocessed_idx, which a planner misled by statistics from a
-- young database (no backlog) would otherwise walk once per notification.
CREATE INDEX outbox_notification_idx ON outbox ((payload->>'notification_id'));
