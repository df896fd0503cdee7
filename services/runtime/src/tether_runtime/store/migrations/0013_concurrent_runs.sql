-- A second message while a run of the conversation is active (issue 18, the agent's
-- `concurrent_runs`): with "enqueue" or "interrupt" the new run is stored `waiting`, which no
-- worker claims (the claim reads only `queued` and lapsed `running` runs), and becomes `queued`
-- when the conversation has no active run left: at once, by the trigger below, when the run
-- before it ends; or by the workers' periodic sweep (store/concurrent_runs.py) if that ending
-- committed while the waiting run's own insert was still in flight.
ALTER TABLE run DROP CONSTRAINT IF EXISTS run_status_check;
ALTER TABLE run ADD CONSTRAINT run_status_check CHECK (status IN
    ('waiting', 'queued', 'running', 'interrupted', 'completed', 'failed', 'cancelled'));

-- The waiting runs, oldest first per conversation (few at any time: a partial index).
CREATE INDEX run_waiting_idx ON run (conversation_id, id) WHERE status = 'waiting';

-- Queue the conversation's oldest waiting run if none of its runs is active; true if one was.
CREATE FUNCTION run_promote_waiting(conv text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    UPDATE run SET status = 'queued', queued_at = now(), updated_at = now()
    WHERE id = (SELECT w.id FROM run w WHERE w.conversation_id = conv AND w.status = 'waiting'
                ORDER BY w.id LIMIT 1)
      AND status = 'waiting'
      AND NOT EXISTS (SELECT 1 FROM run a WHERE a.conversation_id = conv
                      AND a.status IN ('queued', 'running', 'interrupted'));
    IF FOUND THEN
        PERFORM pg_notify('tether_wake', '');
        RETURN true;
    END IF;
    RETURN false;
END $$;

CREATE FUNCTION run_ended_promote_waiting() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM run_promote_waiting(NEW.conversation_id);
    RETURN NULL;
END $$;

-- Fires only when a run reaches an end: the hot updates (claim, renew, checkpoints) skip it on
-- the WHEN clause alone.
CREATE TRIGGER run_ended_promote_waiting AFTER UPDATE OF status ON run
    FOR EACH ROW
    WHEN (NEW.status IN ('completed', 'failed', 'cancelled')
          AND OLD.status NOT IN ('completed', 'failed', 'cancelled'))
    EXECUTE FUNCTION run_ended_promote_waiting();
