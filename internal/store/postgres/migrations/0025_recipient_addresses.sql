-- Issue 37: a recipient's addresses are one JSON object keyed by channel
-- name ({"email": "...", "telegram": "..."}; a channel without an address
-- has no key), so that a new channel needs no column. The values of the
-- three columns move into it, the empty ones left out, and the columns go.
-- The row's revision stays: no one changed the recipient.
ALTER TABLE recipients ADD COLUMN addresses JSONB NOT NULL DEFAULT '{}';

UPDATE recipients SET addresses = jsonb_strip_nulls(jsonb_build_object(
    'email', NULLIF(email, ''),
    'telegram', NULLIF(telegram_chat_id, ''),
    'webhook', NULLIF(webhook_url, '')));

ALTER TABLE recipients
    DROP COLUMN email,
    DROP COLUMN telegram_chat_id,
    DROP COLUMN webhook_url;
