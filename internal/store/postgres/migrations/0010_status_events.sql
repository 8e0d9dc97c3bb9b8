-- Issue 17: the status events (notification.sent, notification.failed) share
-- the outbox with notification.requested, but not its relay: a second relay
-- takes them when they go somewhere the notifications do not (the status
-- webhook), and the table transport's workers take every other row (the
-- notifications, and a row of a type herald does not know, which a worker
-- dead-letters as poison instead of leaving it unprocessed for ever). Each reader walks its own partial index in id order, so that
-- neither walks past the other's backlog: a status webhook that is down
-- for a day leaves its events unprocessed without slowing a claim of
-- notifications, and a backlog of notifications does not slow the status
-- relay. The predicates are the ones the claims write (the relay's type
-- list is planned with its values: plan_cache_mode, see store.go).
-- outbox_work_unprocessed_idx serves the relay that takes only the
-- notifications (beside a status relay) too: its type list implies the
-- predicate. outbox_unprocessed_idx stays for the relay that takes every
-- type.
CREATE INDEX outbox_work_unprocessed_idx ON outbox (id)
    WHERE processed_at IS NULL AND event_type NOT IN ('notification.sent', 'notification.failed');
CREATE INDEX outbox_status_unprocessed_idx ON outbox (id)
    WHERE processed_at IS NULL AND event_type IN ('notification.sent', 'notification.failed');
