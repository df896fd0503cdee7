-- StartRun in ONE round trip (issue 17): the conversation lock and the admission that used to be
-- BEGIN, a locking SELECT, the admission statement and COMMIT, as one function called in
-- autocommit. Exactness is unchanged: in READ COMMITTED each statement of a volatile plpgsql
-- function takes a fresh snapshot, so the active runs are read after the lock is held, exactly as
-- the two statements did (store/run_admission.py).
--
-- OUT: conv_found (false: no such conversation of this user; nothing written), active_ids (the
-- conversation's active runs before this one, oldest first), started (the run stored; NULL when
-- the policy `reject` refused it, nothing written then either).
CREATE FUNCTION run_start(
    p_run_id text, p_conv text, p_user text, p_msg text, p_text text, p_agent text,
    p_trace jsonb, p_type text, p_data bytea, p_wake text, p_checkpoint jsonb, p_policy text,
    OUT conv_found boolean, OUT active_ids text[], OUT started run
) LANGUAGE plpgsql AS $$
DECLARE
    behind boolean;
BEGIN
    PERFORM 1 FROM conversation WHERE id = p_conv AND user_id = p_user FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        conv_found := false;
        RETURN;
    END IF;
    conv_found := true;
    SELECT coalesce(array_agg(id ORDER BY id), '{}') INTO active_ids FROM run
    WHERE conversation_id = p_conv
      AND status IN ('waiting', 'queued', 'running', 'interrupted');
    IF p_policy = 'reject' AND cardinality(active_ids) > 0 THEN
        RETURN;
    END IF;
    behind := p_policy <> 'parallel' AND cardinality(active_ids) > 0;
    INSERT INTO message (id, conversation_id, run_id, role, content)
    VALUES (p_msg, p_conv, p_run_id, 'user', p_text);
    INSERT INTO run (id, conversation_id, user_id, user_message_id, agent, status, trace_context,
                     last_sequence, checkpoint)
    VALUES (p_run_id, p_conv, p_user, p_msg, p_agent,
            CASE WHEN behind THEN 'waiting' ELSE 'queued' END, p_trace, 1,
            CASE WHEN behind THEN '{}'::jsonb ELSE p_checkpoint END)
    RETURNING * INTO started;
    INSERT INTO run_event (run_id, sequence, type, data) VALUES (p_run_id, 1, p_type, p_data);
    IF NOT behind THEN
        PERFORM pg_notify(p_wake, '');
    END IF;
END $$;
