-- The broken test agent's "external system": one row per charge it was asked for. Nothing is
-- unique by idempotency key, although the tool claims the key is honoured.
CREATE TABLE IF NOT EXISTS broken_charge (
    id       bigserial PRIMARY KEY,
    key      text NOT NULL,
    account  text NOT NULL,
    cents    integer NOT NULL,
    at       timestamptz NOT NULL DEFAULT now()
);
