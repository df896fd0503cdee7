-- A caller's own ids for its conversations and runs (issue 32): an AG-UI client picks its
-- `threadId` and each run's `runId` itself, and comes back with them on any gateway pod, at any
-- time. Kept here, with the data they name, so that they last as long as it does (a deleted
-- conversation or an erased user takes theirs: every column erasure.py looks for is here).
-- kind 'conversation': client_id -> conversation_id. kind 'run': client_id -> the run, and the
-- interrupt whose answer began what the id names ('' for the run's start).
CREATE TABLE client_ref (
    user_id         text NOT NULL,
    kind            text NOT NULL CHECK (kind IN ('conversation', 'run')),
    client_id       text NOT NULL,
    conversation_id text NOT NULL REFERENCES conversation (id),
    run_id          text REFERENCES run (id),
    interrupt_id    text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, kind, client_id),
    CHECK ((kind = 'run') = (run_id IS NOT NULL))
);
CREATE INDEX client_ref_conversation_idx ON client_ref (conversation_id);
CREATE INDEX client_ref_run_idx ON client_ref (run_id) WHERE run_id IS NOT NULL;
