-- Tether's data model (DESIGN section 2). Postgres is the truth; Redis only carries copies.

CREATE TABLE conversation (
    id          text PRIMARY KEY,
    user_id     text NOT NULL,
    title       text NOT NULL DEFAULT '',
    facts       jsonb NOT NULL DEFAULT '{}'::jsonb,
    summary     text NOT NULL DEFAULT '',
    version     bigint NOT NULL DEFAULT 1,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX conversation_user_idx ON conversation (user_id, id DESC);

CREATE TABLE message (
    id              text PRIMARY KEY,
    conversation_id text NOT NULL REFERENCES conversation (id),
    run_id          text,
    role            text NOT NULL CHECK (role IN ('user', 'assistant', 'tool')),
    content         text NOT NULL,
    tool_call_id    text,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX message_conversation_idx ON message (conversation_id, id);

CREATE TABLE run (
    id                text PRIMARY KEY,
    conversation_id   text NOT NULL REFERENCES conversation (id),
    user_id           text NOT NULL,
    user_message_id   text NOT NULL REFERENCES message (id),
    agent             text NOT NULL,
    status            text NOT NULL CHECK (status IN
                        ('queued', 'running', 'interrupted', 'completed', 'failed', 'cancelled')),
    checkpoint        jsonb NOT NULL DEFAULT '{}'::jsonb,
    lease_owner       text,
    lease_epoch       bigint NOT NULL DEFAULT 0,
    lease_expires_at  timestamptz,
    cancel_requested  boolean NOT NULL DEFAULT false,
    cancel_reason     text NOT NULL DEFAULT '',
    last_sequence     bigint NOT NULL DEFAULT 0,
    -- Characters of the current model step's text already streamed, so a step retried after a
    -- crash does not stream them twice.
    step_streamed     integer NOT NULL DEFAULT 0,
    trace_context     jsonb NOT NULL DEFAULT '{}'::jsonb,
    queued_at         timestamptz NOT NULL DEFAULT now(),
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX run_conversation_idx ON run (conversation_id, id);
-- The claim query scans only claimable runs.
CREATE INDEX run_claimable_idx ON run (queued_at) WHERE status IN ('queued', 'running');

CREATE TABLE interrupt (
    id               text PRIMARY KEY,
    run_id           text NOT NULL REFERENCES run (id),
    call_id          text NOT NULL,
    kind             text NOT NULL CHECK (kind IN ('confirm_action', 'select_option', 'provide_input')),
    status           text NOT NULL CHECK (status IN ('pending', 'resolved', 'expired', 'cancelled')),
    action           text NOT NULL,
    scope            text NOT NULL,
    payload          jsonb NOT NULL,
    expires_at       timestamptz NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    resolved_at      timestamptz,
    resolved_by      text,
    decision         text,
    input            text,
    idempotency_key  text
);
-- At most one pending interrupt per run.
CREATE UNIQUE INDEX interrupt_one_pending_idx ON interrupt (run_id) WHERE status = 'pending';
CREATE INDEX interrupt_expiry_idx ON interrupt (expires_at) WHERE status = 'pending';

CREATE TABLE run_event (
    run_id      text NOT NULL REFERENCES run (id),
    sequence    bigint NOT NULL,
    type        text NOT NULL,
    -- The serialized tether.runtime.v1.RunEvent, passed through to streams without re-encoding.
    data        bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, sequence)
);

CREATE TABLE tool_call (
    run_id           text NOT NULL REFERENCES run (id),
    call_id          text NOT NULL,
    tool             text NOT NULL,
    args             jsonb NOT NULL,
    status           text NOT NULL CHECK (status IN
                       ('proposed', 'approved', 'executing', 'succeeded', 'failed', 'rejected')),
    result_summary   text,
    result           jsonb,
    idempotency_key  text NOT NULL,
    claimed_epoch    bigint,
    approved_by      text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, call_id)
);

CREATE TABLE idempotency_key (
    scope         text NOT NULL,
    key           text NOT NULL,
    request_hash  text NOT NULL,
    response      jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, key)
);

CREATE TABLE "grant" (
    user_id  text NOT NULL,
    action   text NOT NULL,
    scope    text NOT NULL,
    PRIMARY KEY (user_id, action, scope)
);
