-- Deletion and erasure (issue 18): the one sanctioned change to audit_record. The record of who
-- decided what, when and where stays; its content is masked: `details` becomes
-- {"erased": true}, `client_address` empty, and the erased user's id in `actor` / `approver`
-- becomes a pseudonym ('erased:' and 12 hex digits of its SHA-256). The append-only trigger
-- lets an UPDATE through only inside audit_mask() (a transaction-local flag it sets and clears)
-- and only if it changes nothing but that: every other column equal, the content exactly the
-- masked values. DELETE and TRUNCATE stay refused whoever asks.

CREATE OR REPLACE FUNCTION audit_record_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE'
       AND current_setting('tether.audit_masking', true) = 'on'
       AND NEW.id = OLD.id AND NEW.at = OLD.at AND NEW.action = OLD.action
       AND NEW.run_id = OLD.run_id AND NEW.interrupt_id = OLD.interrupt_id
       AND NEW.call_id = OLD.call_id AND NEW.tool = OLD.tool
       AND NEW.permission = OLD.permission AND NEW.scope = OLD.scope
       AND NEW.decision = OLD.decision AND NEW.outcome = OLD.outcome
       AND NEW.idempotency_key = OLD.idempotency_key AND NEW.pod = OLD.pod
       AND NEW.trace_id = OLD.trace_id
       AND NEW.details = '{"erased": true}'::jsonb AND NEW.client_address = ''
       AND (NEW.actor = OLD.actor OR NEW.actor LIKE 'erased:%')
       AND (NEW.approver = OLD.approver OR NEW.approver LIKE 'erased:%')
    THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'audit_record is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

CREATE FUNCTION audit_pseudonym(user_id text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT 'erased:' || left(encode(sha256(convert_to(user_id, 'UTF8')), 'hex'), 12)
$$;

-- Mask the records of these runs, and (when erased_user is not NULL) every record that user
-- acted in or approved; returns how many were masked.
CREATE FUNCTION audit_mask(run_ids text[], erased_user text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    masked integer;
BEGIN
    PERFORM set_config('tether.audit_masking', 'on', true);
    UPDATE audit_record SET
        details = '{"erased": true}'::jsonb,
        client_address = '',
        actor = CASE WHEN actor = erased_user THEN audit_pseudonym(actor) ELSE actor END,
        approver = CASE WHEN approver = erased_user THEN audit_pseudonym(approver)
                        ELSE approver END
    WHERE run_id = ANY(run_ids)
       OR (erased_user IS NOT NULL AND (actor = erased_user OR approver = erased_user));
    GET DIAGNOSTICS masked = ROW_COUNT;
    PERFORM set_config('tether.audit_masking', 'off', true);
    RETURN masked;
END;
$$;
