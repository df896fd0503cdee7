-- run_event no longer carries a foreign key to run. Every append is already conditional on the
-- run row in the same statement (the fenced `UPDATE run ... RETURNING` that numbers the events,
-- or a status-conditioned append), and runs are never deleted, so the per-row RI check only
-- re-proved what the append had just proved: it cost about a third of the insert's CPU in
-- Postgres (`make bench`, fan-out) and a FOR KEY SHARE lock on the run row per event.
ALTER TABLE run_event DROP CONSTRAINT IF EXISTS run_event_run_id_fkey;
