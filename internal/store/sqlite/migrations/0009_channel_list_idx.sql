-- Issue 17: notifications of every channel. Nothing in the schema stopped a
-- non-email row (recipient and subject are TEXT with no length limit or
-- check; a channel without a subject stores ''), so rows are unchanged. The
-- listing's channel filter gets the same index as the PostgreSQL store,
-- under the same name, read backwards already in order.
CREATE INDEX notifications_channel_created_idx ON notifications (channel, created_at, id);
