-- Issue 38: a deferral is recorded once per outage, not once per probe.
-- A deferred attempt keeps its kind (deferral: down, throttled, limit,
-- stopped); when the notification's next attempt is a deferral of the same
-- kind, the record folds it into this row (repeats + 1, last_at, the latest
-- error) and drops the new one, so that a notification waiting out a long
-- outage keeps one row for it. Columns with a constant default or none
-- rewrite nothing, and none is indexed: the fold stays a HOT update.
ALTER TABLE delivery_attempts
    ADD COLUMN deferral TEXT        NULL,
    ADD COLUMN repeats  INT         NOT NULL DEFAULT 0,
    ADD COLUMN last_at  TIMESTAMPTZ NULL;
