-- Issue 22: the trace context of the create travels with its outbox event,
-- as in the PostgreSQL store: a W3C traceparent, NULL when the event was
-- written untraced. The table transport's workers read it from the row.
ALTER TABLE outbox ADD COLUMN traceparent TEXT;
