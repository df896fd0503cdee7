-- The OpsPilot demo inventory: what a real ops API would own.
CREATE TABLE IF NOT EXISTS inv_service (
    name      text NOT NULL,
    env       text NOT NULL,
    replicas  integer NOT NULL,
    PRIMARY KEY (name, env)
);

CREATE TABLE IF NOT EXISTS inv_instance (
    id             text PRIMARY KEY,
    service        text NOT NULL,
    env            text NOT NULL,
    status         text NOT NULL CHECK (status IN ('healthy', 'abnormal', 'restarting', 'stopped')),
    restart_count  integer NOT NULL DEFAULT 0,
    last_restart   timestamptz,
    FOREIGN KEY (service, env) REFERENCES inv_service (name, env)
);

CREATE TABLE IF NOT EXISTS inv_error (
    id           bigserial PRIMARY KEY,
    service      text NOT NULL,
    env          text NOT NULL,
    instance_id  text,
    status_code  integer NOT NULL,
    message      text NOT NULL,
    at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS inv_error_service_idx ON inv_error (service, env, at DESC);

CREATE TABLE IF NOT EXISTS inv_log (
    id           bigserial PRIMARY KEY,
    instance_id  text NOT NULL,
    level        text NOT NULL,
    line         text NOT NULL,
    at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS inv_log_instance_idx ON inv_log (instance_id, at DESC);

-- The inventory API's own idempotency record: the same key never acts twice.
CREATE TABLE IF NOT EXISTS inv_operation (
    idempotency_key  text PRIMARY KEY,
    operation        text NOT NULL,
    target           text NOT NULL,
    result           jsonb NOT NULL,
    at               timestamptz NOT NULL DEFAULT now()
);
