-- The example ops agent's "infrastructure": services with a health status, and every restart
-- performed (one row per execution of the restart tool, so a test can count them).
CREATE TABLE lgops_service (
    name    text PRIMARY KEY,
    status  text NOT NULL CHECK (status IN ('healthy', 'degraded', 'down'))
);

CREATE TABLE lgops_restart (
    id               bigserial PRIMARY KEY,
    service          text NOT NULL,
    idempotency_key  text,
    restarted_at     timestamptz NOT NULL DEFAULT now()
);
