-- Issue 35, points 1 and 2: recipients and templates (see the PostgreSQL
-- migration 0021).
CREATE TABLE recipients (
    user_id          TEXT    PRIMARY KEY,
    email            TEXT    NOT NULL DEFAULT '',
    telegram_chat_id TEXT    NOT NULL DEFAULT '',
    webhook_url      TEXT    NOT NULL DEFAULT '',
    locale           TEXT    NOT NULL DEFAULT '',
    time_zone        TEXT    NOT NULL DEFAULT '',
    revision         INTEGER NOT NULL DEFAULT 1,
    updated_at       TEXT    NOT NULL
) STRICT;

CREATE TABLE template_versions (
    name       TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    channel    TEXT    NOT NULL,
    locale     TEXT    NOT NULL DEFAULT '',
    subject    TEXT    NOT NULL DEFAULT '',
    text_part  TEXT    NOT NULL DEFAULT '',
    html_part  TEXT    NOT NULL DEFAULT '',
    created_at TEXT    NOT NULL,
    PRIMARY KEY (name, version)
) STRICT;
CREATE INDEX template_versions_variant_idx ON template_versions (name, channel, locale, version DESC);

ALTER TABLE notifications ADD COLUMN html TEXT NOT NULL DEFAULT '';
ALTER TABLE notifications ADD COLUMN template TEXT NOT NULL DEFAULT '';
ALTER TABLE notifications ADD COLUMN template_version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE notifications ADD COLUMN locale TEXT NOT NULL DEFAULT '';
ALTER TABLE notifications ADD COLUMN request_digest TEXT NOT NULL DEFAULT '';
