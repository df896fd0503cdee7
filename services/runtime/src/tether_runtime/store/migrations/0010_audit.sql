-- The audit record (DESIGN section 13): every decision on an interrupt and every write tool
-- execution, append-only. Triggers refuse UPDATE, DELETE and TRUNCATE whoever asks: changing
-- history takes dropping the trigger, a schema change that shows in the migrations.

CREATE TABLE audit_record (
    id               text PRIMARY KEY,            -- aud_…, sortable by time
    at               timestamptz NOT NULL DEFAULT now(),
    actor            text NOT NULL,               -- the user who decided, or 'system'
    action           text NOT NULL,               -- e.g. interrupt.approved, tool.executed
    run_id           text NOT NULL DEFAULT '',
    interrupt_id     text NOT NULL DEFAULT '',
    call_id          text NOT NULL DEFAULT '',
    tool             text NOT NULL DEFAULT '',
    permission       text NOT NULL DEFAULT '',    -- the grant action checked (instance.restart)
    scope            text NOT NULL DEFAULT '',
    decision         text NOT NULL DEFAULT '',
    outcome          text NOT NULL DEFAULT '',
    approver         text NOT NULL DEFAULT '',
    idempotency_key  text NOT NULL DEFAULT '',
    client_address   text NOT NULL DEFAULT '',
    pod              text NOT NULL DEFAULT '',
    trace_id         text NOT NULL DEFAULT '',
    details          jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX audit_record_at_idx ON audit_record (at, id);
CREATE INDEX audit_record_actor_idx ON audit_record (actor, at, id);

CREATE FUNCTION audit_record_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_record is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
CREATE TRIGGER audit_record_no_update_delete BEFORE UPDATE OR DELETE ON audit_record
    FOR EACH ROW EXECUTE FUNCTION audit_record_append_only();
CREATE TRIGGER audit_record_no_truncate BEFORE TRUNCATE ON audit_record
    FOR EACH STATEMENT EXECUTE FUNCTION audit_record_append_only();
