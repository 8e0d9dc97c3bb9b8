-- Issue 23, point 4: the outbox partitioned by day on occurred_at, so that
-- retention detaches and drops a day instead of deleting its rows one by
-- one (docs/benchmarks.md, "Past one database").
--
-- No row is copied: the existing table becomes the first partition,
-- outbox_legacy, for every occurred_at before T, the start of the UTC day
-- after this migration (or after its newest row, if later). The daily
-- partitions from T on are not made here but by the store right after
-- the migration commits, and by every herald process that starts or
-- prunes (partition maintenance, see the store's partitions.go): until T
-- the new rows go to outbox_legacy, so a create never lacks a partition
-- even if that first maintenance could not run.
--
-- The DDL works on the live table under an ACCESS EXCLUSIVE lock for the
-- migration's transaction: the new primary key's index is built and the
-- bound is checked by a scan of the table. Like 0005, apply it at a quiet
-- time on a large outbox; nothing is rewritten.

LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE;

ALTER TABLE outbox RENAME TO outbox_legacy;
-- Index names are per schema: the parent takes the old names, each
-- partition's indexes are named after its own (<partition>_<suffix>).
ALTER INDEX outbox_pkey RENAME TO outbox_legacy_id_key;
ALTER INDEX outbox_unprocessed_idx RENAME TO outbox_legacy_unprocessed_idx;
ALTER INDEX outbox_work_unprocessed_idx RENAME TO outbox_legacy_work_unprocessed_idx;
ALTER INDEX outbox_status_unprocessed_idx RENAME TO outbox_legacy_status_unprocessed_idx;
ALTER INDEX outbox_processed_idx RENAME TO outbox_legacy_processed_idx;
ALTER INDEX outbox_notification_idx RENAME TO outbox_legacy_notification_idx;

-- A partitioned table's unique keys must include the partition key: the
-- key becomes (id, occurred_at). id stays unique in fact (one sequence,
-- no writer sets it), but only the pair is enforced. The legacy table's
-- key is swapped for one on the pair, which its lookups by id use as well
-- (id leads).
CREATE UNIQUE INDEX outbox_legacy_pkey ON outbox_legacy (id, occurred_at);
ALTER TABLE outbox_legacy
    DROP CONSTRAINT outbox_legacy_id_key,
    ADD CONSTRAINT outbox_legacy_pkey PRIMARY KEY USING INDEX outbox_legacy_pkey;

-- The parent: the same columns, defaults (id from outbox_id_seq) and NOT
-- NULLs, and the indexes of migrations 0001-0010 under their names. A
-- partitioned table stores nothing, so it has no fill factor (0013): each
-- partition is made with its own.
CREATE TABLE outbox (
    LIKE outbox_legacy INCLUDING DEFAULTS,
    CONSTRAINT outbox_pkey PRIMARY KEY (id, occurred_at)
) PARTITION BY RANGE (occurred_at);

CREATE INDEX outbox_unprocessed_idx ON outbox (id) WHERE processed_at IS NULL;
CREATE INDEX outbox_work_unprocessed_idx ON outbox (id)
    WHERE processed_at IS NULL AND event_type NOT IN ('notification.sent', 'notification.failed');
CREATE INDEX outbox_status_unprocessed_idx ON outbox (id)
    WHERE processed_at IS NULL AND event_type IN ('notification.sent', 'notification.failed');
CREATE INDEX outbox_processed_idx ON outbox (processed_at) WHERE processed_at IS NOT NULL;
CREATE INDEX outbox_notification_idx ON outbox ((payload->>'notification_id'));

-- The sequence belonged to the old table's column: it would go with
-- outbox_legacy when retention drops it.
ALTER SEQUENCE outbox_id_seq OWNED BY outbox.id;

DO $$
DECLARE
    t timestamptz;
BEGIN
    SELECT greatest(
            date_trunc('day', now() AT TIME ZONE 'UTC') + interval '1 day',
            date_trunc('day', max(occurred_at) AT TIME ZONE 'UTC') + interval '1 day'
        ) AT TIME ZONE 'UTC'
    INTO t FROM outbox_legacy;
    -- The CHECK implies the partition's bound, so the attach skips its
    -- own scan; the attach finds each of the parent's indexes already
    -- built on outbox_legacy (same columns, same predicate) and adopts it
    -- instead of building another.
    EXECUTE format('ALTER TABLE outbox_legacy ADD CONSTRAINT outbox_legacy_bound CHECK (occurred_at < %L::timestamptz) NOT VALID', t);
    ALTER TABLE outbox_legacy VALIDATE CONSTRAINT outbox_legacy_bound;
    EXECUTE format('ALTER TABLE outbox ATTACH PARTITION outbox_legacy FOR VALUES FROM (MINVALUE) TO (%L)', t);
    -- The partition's bound says the same from now on.
    ALTER TABLE outbox_legacy DROP CONSTRAINT outbox_legacy_bound;
END
$$;
