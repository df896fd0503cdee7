-- The mailer's customers, and its own record of what it sent: one row per campaign (a send_campaign
-- call, named by Tether's idempotency key) and one per recipient of it, with that recipient's state.
CREATE TABLE IF NOT EXISTS mail_customer (
    id       serial PRIMARY KEY,
    email    text NOT NULL UNIQUE,
    name     text NOT NULL,
    segment  text NOT NULL
);
CREATE INDEX IF NOT EXISTS mail_customer_segment_idx ON mail_customer (segment);

CREATE TABLE IF NOT EXISTS mail_campaign (
    key         text PRIMARY KEY,
    segment     text NOT NULL,
    subject     text NOT NULL,
    body        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- pending: not started. sending: the message was being handed to the SMTP server and its reply
-- was not recorded (after a crash: in doubt, never sent again by the tool). sent: the server
-- answered 250. failed: the server refused it (nothing was delivered).
CREATE TABLE IF NOT EXISTS mail_delivery (
    campaign_key  text NOT NULL REFERENCES mail_campaign (key),
    position      integer NOT NULL,
    email         text NOT NULL,
    name          text NOT NULL,
    message_id    text NOT NULL UNIQUE,
    status        text NOT NULL DEFAULT 'pending'
                  CHECK (status IN ('pending', 'sending', 'sent', 'failed')),
    detail        text NOT NULL DEFAULT '',
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (campaign_key, email)
);
