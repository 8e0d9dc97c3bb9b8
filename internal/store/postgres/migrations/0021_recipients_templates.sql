-- Issue 35, points 1 and 2: recipients and templates.
--
-- A recipient is one user's delivery profile: the address of each channel,
-- a locale and a time zone (all '' when unset). revision counts its writes:
-- a create that read it commits only while it is still at that revision
-- (under a shared lock on the row), so that an address a concurrent change
-- or erasure removed is never written.
CREATE TABLE recipients (
    user_id          TEXT        PRIMARY KEY,
    email            TEXT        NOT NULL DEFAULT '',
    telegram_chat_id TEXT        NOT NULL DEFAULT '',
    webhook_url      TEXT        NOT NULL DEFAULT '',
    locale           TEXT        NOT NULL DEFAULT '',
    time_zone        TEXT        NOT NULL DEFAULT '',
    revision         BIGINT      NOT NULL DEFAULT 1,
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- A template version: the parts of one channel in one locale ('' is the
-- default variant). Versions are numbered per name, whatever the channel
-- and locale, and never change. The primary key serves "the newest
-- version at or below v of each channel and locale" (a create's look-up).
-- Room is left for later points (a category, the preference links) in
-- tables of their own.
CREATE TABLE template_versions (
    name       TEXT        NOT NULL,
    version    INT         NOT NULL,
    channel    TEXT        NOT NULL,
    locale     TEXT        NOT NULL DEFAULT '',
    subject    TEXT        NOT NULL DEFAULT '',
    text_part  TEXT        NOT NULL DEFAULT '',
    html_part  TEXT        NOT NULL DEFAULT '',
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (name, version)
);
CREATE INDEX template_versions_variant_idx ON template_versions (name, channel, locale, version DESC);

-- What a notification was rendered from, its HTML part, and the digest of
-- the request as given (for an idempotent replay of a create whose fields
-- were resolved). Constant defaults: no row is rewritten.
ALTER TABLE notifications
    ADD COLUMN html             TEXT NOT NULL DEFAULT '',
    ADD COLUMN template         TEXT NOT NULL DEFAULT '',
    ADD COLUMN template_version INT  NOT NULL DEFAULT 0,
    ADD COLUMN locale           TEXT NOT NULL DEFAULT '',
    ADD COLUMN request_digest   TEXT NOT NULL DEFAULT '';
