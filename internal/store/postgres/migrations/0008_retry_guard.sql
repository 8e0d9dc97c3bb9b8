-- The stale-copy guard. A message and its retry copies share one message id
-- (the outbox id); a broker can hand out a stale copy after the retry of
-- the same delivery was recorded and its copy published (Kafka: the
-- original of a revoked partition whose offset was never committed; NATS: a
-- copy moved early after the ack wait; RabbitMQ: an original whose ack was
-- lost). next_retry_count is the least x-retry-count a delivery of the
-- message id must carry to be claimed: a recorded retry of a claim taken
-- for a copy with count k sets it to k+1 (never lowering it), and a claim
-- for a lower count is answered duplicate without sending. The row then
-- stays, released (processed_at, lease_until and attempt_id NULL), to keep
-- the mark for the retry copy.
--
-- 0 is no mark: every count passes, which is what rows written before this
-- migration mean. A constant default adds the column without rewriting the
-- table.
ALTER TABLE processed_messages
    ADD COLUMN next_retry_count INT NOT NULL DEFAULT 0;
