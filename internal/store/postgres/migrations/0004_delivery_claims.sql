-- Claims held across a send, with no transaction open during it. Before
-- its send a worker claims the message id (a processed_messages row with
-- processed_at NULL and a lease) and the notification (claim_attempt_id,
-- claimed_until), in one short transaction; after the send it records the
-- outcome, done or released, in another. The claim's token is the id of the
-- delivery_attempts row it started: every record is a compare-and-set on
-- it, so a holder whose lease was taken over changes nothing.
--
-- processed_at keeps its default so that a process of the previous release
-- still running during an upgrade records done rows as before; this
-- release always writes it explicitly (NULL while claimed).
ALTER TABLE processed_messages
    ALTER COLUMN processed_at DROP NOT NULL,
    ADD COLUMN lease_until TIMESTAMPTZ NULL,
    ADD COLUMN attempt_id  BIGINT      NULL;

-- At most one send in flight per notification, whichever message carries
-- it (a copy, a redriven or a reconciled event).
ALTER TABLE notifications
    ADD COLUMN claim_attempt_id BIGINT      NULL,
    ADD COLUMN claimed_until    TIMESTAMPTZ NULL;
