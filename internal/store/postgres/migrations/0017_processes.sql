-- Issue 38: every long-running herald process (api, relay, worker, serve)
-- reports itself here every few seconds, a worker with the state of its
-- senders, so that the API's process (its console and GET /status) shows
-- the whole deployment. A row not refreshed for a while is a process gone:
-- the readers show it stale, and the writers delete it later. The table
-- holds one row per running process: no index beside its key.
CREATE TABLE processes (
    id         TEXT        PRIMARY KEY,
    host       TEXT        NOT NULL,
    pid        INTEGER     NOT NULL,
    roles      TEXT        NOT NULL,
    version    TEXT        NOT NULL DEFAULT '',
    started_at TIMESTAMPTZ NOT NULL,
    seen_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    senders    JSONB       NOT NULL DEFAULT '[]'
);
