-- Webhooks (DESIGN section 12): endpoints an operator configures, and the outbox of deliveries
-- written in the same transaction as the state change that causes them.

CREATE TABLE webhook_endpoint (
    id          text PRIMARY KEY,
    url         text NOT NULL,
    -- The event types this endpoint receives (interrupt.raised, interrupt.resolved,
    -- run.completed, run.failed).
    events      text[] NOT NULL,
    -- The HMAC-SHA256 signing secret: read only to sign, never returned, printed or logged.
    secret      text NOT NULL,
    enabled     boolean NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per (event, endpoint): the outbox. `next_attempt_at` is also the lease: a delivery
-- loop that claims a row pushes it past the attempt's timeout, so a pod that dies mid-delivery
-- leaves the row due again once that passes, and `claim_token` fences the finishing update.
CREATE TABLE webhook_delivery (
    id               text PRIMARY KEY,
    event_id         text NOT NULL,
    event_type       text NOT NULL,
    endpoint_id      text NOT NULL REFERENCES webhook_endpoint (id) ON DELETE CASCADE,
    run_id           text NOT NULL,
    payload          jsonb NOT NULL,
    status           text NOT NULL DEFAULT 'pending'
                       CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    claim_token      text,
    last_error       text NOT NULL DEFAULT '',
    last_status_code integer,
    created_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    UNIQUE (event_id, endpoint_id)
);
-- The claim reads each endpoint's first due rows by index, whatever its backlog.
CREATE INDEX webhook_delivery_due_idx ON webhook_delivery (endpoint_id, next_attempt_at, id)
    WHERE status = 'pending';
-- `tether webhooks deliveries`: the newest first.
CREATE INDEX webhook_delivery_created_idx ON webhook_delivery (created_at DESC, id DESC);
