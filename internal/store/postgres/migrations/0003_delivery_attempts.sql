-- Every delivery attempt, in order: the history GET
-- /notifications/{id}/attempts shows. The worker inserts a row when it claims
-- a message (started_at, outcome NULL while the send runs) and finishes it in
-- the transaction that records the outcome. No foreign key: attempts stay
-- when retention prunes other rows, and a claim never waits on the parent.
CREATE TABLE delivery_attempts (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    notification_id BIGINT      NOT NULL,
    message_id      BIGINT      NOT NULL,
    attempt         INT         NOT NULL,
    started_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at     TIMESTAMPTZ NULL,
    -- sent, retry, dead, deferred (the mail server was down: no attempt
    -- spent), or NULL while the send is in flight.
    outcome         TEXT        NULL
                    CHECK (outcome IN ('sent', 'retry', 'dead', 'deferred')),
    error           TEXT        NULL
);

CREATE INDEX delivery_attempts_notification_idx ON delivery_attempts (notification_id, id);
