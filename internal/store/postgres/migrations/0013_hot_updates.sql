-- Issue 23: fewer index entries per notification. An UPDATE that changes no
-- indexed column and finds room on the row's own page is a HOT update: it
-- writes the new row version and no index entry. Three of the updates a
-- notification goes through change no indexed column: the worker's claim
-- of the notification (claim_attempt_id, claimed_until: seven index
-- entries otherwise), the lease of its outbox row by the relay or the
-- table transport (locked_by, locked_until: four), and the finishing of
-- its attempt row (finished_at, outcome, error: two). Rows are appended in
-- id order and a full page leaves no room, so each of those updates moved
-- its row to another page and wrote every index again. A fill factor of 70
-- leaves 30% of each new page free for them.
--
-- Only pages written from now on are filled to 70%; nothing is rewritten,
-- and ALTER TABLE ... SET (fillfactor) takes a lock that lets reads and
-- writes go on.
ALTER TABLE notifications SET (fillfactor = 70);
ALTER TABLE outbox SET (fillfactor = 70);
ALTER TABLE delivery_attempts SET (fillfactor = 70);
