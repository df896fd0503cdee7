-- A graph agent's input as the caller gave it (issue 30, StartRunRequest.input_json): stored with
-- the run, so a worker that starts it late (`waiting`, whose starting state is built then) or
-- takes it over after a crash hands the graph the same input. NULL: the run started from its text.
ALTER TABLE run ADD COLUMN input jsonb;

-- run_start (migration 0018) with the input: an overload (a start from text still calls the first
-- form), so a pod of the previous release keeps working during a rolling deploy.
CREATE FUNCTION run_start(
    p_run_id text, p_conv text, p_user text, p_msg text, p_text text, p_agent text,
    p_trace jsonb, p_type text, p_data bytea, p_wake text, p_checkpoint jsonb, p_policy text,
    p_input jsonb,
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
                     last_sequence, checkpoint, input)
    VALUES (p_run_id, p_conv, p_user, p_msg, p_agent,
            CASE WHEN behind THEN 'waiting' ELSE 'queued' END, p_trace, 1,
            CASE WHEN behind THEN '{}'::jsonb ELSE p_checkpoint END, p_input)
    RETURNING * INTO started;
    INSERT INTO run_event (run_id, sequence, type, data) VALUES (p_run_id, 1, p_type, p_data);
    IF NOT behind THEN
        PERFORM pg_notify(p_wake, '');
    END IF;
END $$;
