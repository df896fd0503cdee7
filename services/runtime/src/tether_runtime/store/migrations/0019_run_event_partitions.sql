-- run_event partitioned by time, with retention (issue 18). Partitioned BY RANGE (run_id), not by
-- created_at: run ids are ULID-style (48 bits of milliseconds first, Crockford base32, ids.py), so
-- a bound made of an id prefix is a point in time, and every event of a run lives in the partition
-- of the run's creation period. So the primary key stays (run_id, sequence) (a created_at key
-- would have to join it, and the key would no longer prove density per run), every read by run_id
-- (replay, streamed_text, erasure) prunes to one partition without a time bound, and dropping a
-- partition removes whole runs' logs, never half of one (a stream of a run either replays all
-- of it or gets `reset`). What it costs: a day's partition holds the events of the runs created
-- that day, however long they ran; the drop job (store/event_partitions.py) never drops a
-- partition while a run in it is not finished.
--
-- Bounds are computed from the Postgres clock in SQL (tether_id_floor), so pods agree on them.
-- The conversion keeps the existing rows: the old table becomes the first partition, covering
-- every id before this migration; partitions of whole days (UTC) follow, made ahead of time by the
-- job, and a DEFAULT partition takes any id outside them (ids not shaped as ULIDs, or a pod clock
-- far ahead), so an insert never fails for want of a partition. Attaching the old table reads it
-- once to check its bound, under the migration's locks (appends wait that long during the deploy
-- that applies this migration): 0.44 s for a million rows on the 2-core test machine.

-- The smallest id of kind `prefix` minted at `at` (or later): prefix, '_', ten base32 digits of
-- the milliseconds, exactly as tether_common.ids.new_id writes them.
CREATE FUNCTION tether_id_floor(prefix text, at timestamptz) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    ms bigint := floor(extract(epoch FROM at) * 1000)::bigint;
    digits constant text := '0123456789abcdefghjkmnpqrstvwxyz';
    out text := '';
BEGIN
    FOR i IN 1..10 LOOP
        out := substr(digits, (ms % 32)::int + 1, 1) || out;
        ms := ms / 32;
    END LOOP;
    RETURN prefix || '_' || out;
END
$$;

-- The lower bound of the event log kept: a run whose id sorts below `horizon` had its events
-- dropped by retention ('' = nothing dropped yet). One row, moved by the drop job in the
-- transaction that drops, so nothing per run is touched (GetRun's `events_expired` compares).
CREATE TABLE event_retention (
    one         boolean PRIMARY KEY DEFAULT true CHECK (one),
    horizon     text NOT NULL DEFAULT '',
    updated_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO event_retention DEFAULT VALUES;

ALTER TABLE run_event RENAME TO run_event_legacy;
ALTER TABLE run_event_legacy RENAME CONSTRAINT run_event_pkey TO run_event_legacy_pkey;

CREATE TABLE run_event (
    run_id      text NOT NULL,
    sequence    bigint NOT NULL,
    type        text NOT NULL,
    -- The serialized tether.runtime.v1.RunEvent, passed through to streams without re-encoding.
    data        bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, sequence)
) PARTITION BY RANGE (run_id);

ALTER TABLE run_event ATTACH PARTITION run_event_legacy
    FOR VALUES FROM (MINVALUE) TO (tether_id_floor('run', now()));

-- From now to the end of the day (UTC), then two whole days: the job keeps three days ahead.
DO $$
DECLARE
    lo timestamptz := now();
    hi timestamptz := date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
                      + interval '1 day';
    name text;
BEGIN
    FOR i IN 1..3 LOOP
        name := 'run_event_p' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD');
        EXECUTE format('CREATE TABLE %I PARTITION OF run_event FOR VALUES FROM (%L) TO (%L)',
                       name, tether_id_floor('run', lo), tether_id_floor('run', hi));
        lo := hi;
        hi := hi + interval '1 day';
    END LOOP;
END
$$;

CREATE TABLE run_event_default PARTITION OF run_event DEFAULT;
