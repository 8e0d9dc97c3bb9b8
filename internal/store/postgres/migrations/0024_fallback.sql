-- Issue 35, point 5: one event, several channels. A create with a
-- fallback list keeps the later channels' resolved hops with its
-- notification (fallback, JSON; '' for none); the transaction that
-- dead-letters it creates the next hop, a notification linked to the
-- first of the chain (fallback_of), and records it (fallback_next).
-- Constant default and nullable columns: no row is rewritten.
ALTER TABLE notifications ADD COLUMN fallback TEXT NOT NULL DEFAULT '',
	ADD COLUMN fallback_of BIGINT, ADD COLUMN fallback_next BIGINT;
