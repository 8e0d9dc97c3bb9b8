-- Issue 37: a recipient's addresses are one JSON object keyed by channel
-- name (see the PostgreSQL migration 0025). json_patch onto {} drops the
-- null members, so an empty column leaves no key.
ALTER TABLE recipients ADD COLUMN addresses TEXT NOT NULL DEFAULT '{}';

UPDATE recipients SET addresses = json_patch('{}', json_object(
    'email', NULLIF(email, ''),
    'telegram', NULLIF(telegram_chat_id, ''),
    'webhook', NULLIF(webhook_url, '')));

ALTER TABLE recipients DROP COLUMN email;
ALTER TABLE recipients DROP COLUMN telegram_chat_id;
ALTER TABLE recipients DROP COLUMN webhook_url;
