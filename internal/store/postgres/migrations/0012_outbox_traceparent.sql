-- Issue 22: the trace context of the create travels with its outbox event,
-- so that the relay's publish and the worker's delivery join the create's
-- trace. A W3C traceparent (55 characters today; TEXT leaves room for a
-- later version); NULL when the event was written untraced (tracing off, a
-- reconcile or a redrive). Adding a nullable column without a default
-- rewrites nothing.
ALTER TABLE outbox ADD COLUMN traceparent TEXT;
