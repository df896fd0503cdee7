-- The ledger test agent's "external system": what it was asked to do, and what it did.
CREATE TABLE IF NOT EXISTS ledger_call (
    id      bigserial PRIMARY KEY,
    tool    text NOT NULL,
    key     text NOT NULL,
    at      timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS ledger_effect (
    id         bigserial PRIMARY KEY,
    tool       text NOT NULL,
    key        text NOT NULL,
    recipient  text NOT NULL,
    at         timestamptz NOT NULL DEFAULT now()
);
-- Only the keyed tool's effects are unique by key: the external system honours the key.
CREATE UNIQUE INDEX IF NOT EXISTS ledger_effect_keyed_idx ON ledger_effect (key)
    WHERE tool = 'send_keyed';
