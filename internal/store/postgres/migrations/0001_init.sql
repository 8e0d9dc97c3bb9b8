-- The initial schema. Names are the public contract (docs/design.md, "Storage").

CREATE TABLE notifications (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id         TEXT        NOT NULL,
    channel         TEXT        NOT NULL,
    recipient       TEXT        NOT NULL,
    subject         TEXT        NOT NULL,
    body            TEXT        NOT NULL,
    status          TEXT        NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'sent', 'failed')),
    attempts        INT         NOT NULL DEFAULT 0,
    last_error      TEXT        NULL,
    idempotency_key TEXT        NULL UNIQUE,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    sent_at         TIMESTAMPTZ NULL,
    -- failed_at is when the notification was dead-lettered, for listing
    -- the dead letters newest first.
    failed_at       TIMESTAMPTZ NULL
);

CREATE TABLE outbox (
    id           BIGSERIAL   PRIMARY KEY,
    event_type   TEXT        NOT NULL,
    payload      JSONB       NOT NULL,
    occurred_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    processed_at TIMESTAMPTZ NULL,
    -- The columns below serve the broker-less table transport, which leases
    -- rows to workers and retries them in place.
    attempts     INT         NOT NULL DEFAULT 0,
    available_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    locked_until TIMESTAMPTZ NULL,
    locked_by    TEXT        NULL,
    last_error   TEXT        NULL
);

-- The relay and the table transport only ever look for unprocessed rows;
-- the partial index stays as small as the backlog however large the table
-- grows.
CREATE INDEX outbox_unprocessed_idx ON outbox (id) WHERE processed_at IS NULL;

-- message_id is the outbox id, deliberately without a foreign key: outbox
-- rows and dedup rows are pruned on their own schedules.
CREATE TABLE processed_messages (
    message_id   BIGINT      PRIMARY KEY,
    processed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
