"""The checkpointer's statements on the tables of migration 0008_langgraph_checkpoints.sql.
JSON goes in and out as text (`$n::text::jsonb`, `col::text`), so the pool's codecs do not
matter."""

from __future__ import annotations

# A checkpoint row with its channel values (the blobs at the versions its checkpoint names,
# empty channels left out) and its pending writes in `writes_sort_key` order.
SELECT_TUPLES = """
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
       c.checkpoint::text AS checkpoint, c.metadata::text AS metadata,
       (SELECT array_agg((b.channel, b.type, b.blob))
          FROM jsonb_each_text(c.checkpoint -> 'channel_versions') v
          JOIN langgraph_checkpoint_blob b
            ON b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
           AND b.channel = v.key AND b.version = v.value
         WHERE b.type <> 'empty') AS channel_values,
       (SELECT array_agg((w.task_id, w.channel, w.type, w.blob)
                         ORDER BY w.task_path, w.task_id, w.idx)
          FROM langgraph_checkpoint_write w
         WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
           AND w.checkpoint_id = c.checkpoint_id) AS pending_writes
  FROM langgraph_checkpoint c
"""

# The two writes of every graph step (aput, aput_writes) as one statement each: one round trip
# where a transaction took four or five (BEGIN, the fence, the inserts, COMMIT). `fence` is the
# run row locked FOR SHARE while its lease epoch is the writer's (RunFence.hold's check) or, for
# an unfenced saver, one row; each insert writes only if it found a row, and the statement
# returns how many it found: 0 is LeaseLost, nothing written. One statement is one transaction:
# the share lock holds until the write commits, so no takeover commits between check and write.
_FENCED = "SELECT 1 FROM run WHERE id = $R::text AND lease_epoch = $E::bigint FOR SHARE"
_UNFENCED = "SELECT 1"

_PUT = """
WITH fence AS MATERIALIZED ({fence}),
blobs AS (
  INSERT INTO langgraph_checkpoint_blob (thread_id, checkpoint_ns, channel, version, type, blob)
  SELECT $1, $2, u.channel, u.version, u.type, u.blob
    FROM unnest($3::text[], $4::text[], $5::text[], $6::bytea[]) AS u(channel, version, type, blob)
   WHERE EXISTS (SELECT 1 FROM fence)
  ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING
),
saved AS (
  INSERT INTO langgraph_checkpoint (thread_id, checkpoint_ns, checkpoint_id,
                                    parent_checkpoint_id, checkpoint, metadata, tether_run_id,
                                    tether_epoch)
  SELECT $1, $2, $7::text, $8::text, $9::text::jsonb, $10::text::jsonb, $11::text, $12::bigint
   WHERE EXISTS (SELECT 1 FROM fence)
  ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET
    checkpoint = EXCLUDED.checkpoint, metadata = EXCLUDED.metadata,
    tether_run_id = EXCLUDED.tether_run_id, tether_epoch = EXCLUDED.tether_epoch
)
SELECT count(*) FROM fence
"""
# $1 thread, $2 namespace, $3-$6 the blobs (channel, version, type, blob), $7 checkpoint id,
# $8 parent id, $9 checkpoint, $10 metadata, $11 run, $12 epoch (NULL, NULL unfenced)
PUT_FENCED = _PUT.format(fence=_FENCED.replace("$R", "$11").replace("$E", "$12"))
PUT_UNFENCED = _PUT.format(fence=_UNFENCED)

_PUT_WRITES = """
WITH fence AS MATERIALIZED ({fence}),
written AS (
  INSERT INTO langgraph_checkpoint_write (thread_id, checkpoint_ns, checkpoint_id, task_id,
                                          task_path, idx, channel, type, blob)
  SELECT $1, $2, $3, $4, $5, u.idx, u.channel, u.type, u.blob
    FROM unnest($6::int[], $7::text[], $8::text[], $9::bytea[]) AS u(idx, channel, type, blob)
   WHERE EXISTS (SELECT 1 FROM fence)
  ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) {conflict}
)
SELECT count(*) FROM fence
"""
# Regular writes are kept as first written (a task re-run writes the same); special ones (error,
# interrupt, resume: negative idx) are written again in place.
_KEEP = "DO NOTHING"
_REPLACE = "DO UPDATE SET channel = EXCLUDED.channel, type = EXCLUDED.type, blob = EXCLUDED.blob"
# $1 thread, $2 namespace, $3 checkpoint id, $4 task, $5 task path, $6-$9 the writes (idx,
# channel, type, blob); fenced: $10 run, $11 epoch
_WRITES_FENCE = _FENCED.replace("$R", "$10").replace("$E", "$11")
INSERT_WRITES_FENCED = _PUT_WRITES.format(fence=_WRITES_FENCE, conflict=_KEEP)
INSERT_WRITES_UNFENCED = _PUT_WRITES.format(fence=_UNFENCED, conflict=_KEEP)
UPSERT_WRITES_FENCED = _PUT_WRITES.format(fence=_WRITES_FENCE, conflict=_REPLACE)
UPSERT_WRITES_UNFENCED = _PUT_WRITES.format(fence=_UNFENCED, conflict=_REPLACE)

DELETE_THREADS = (
    "DELETE FROM langgraph_checkpoint WHERE thread_id = ANY($1::text[])",
    "DELETE FROM langgraph_checkpoint_blob WHERE thread_id = ANY($1::text[])",
    "DELETE FROM langgraph_checkpoint_write WHERE thread_id = ANY($1::text[])",
)

# After checkpoints of these threads were deleted: their writes, and the blobs no remaining
# checkpoint names.
DELETE_ORPHANS = (
    """DELETE FROM langgraph_checkpoint_write w WHERE w.thread_id = ANY($1::text[])
         AND NOT EXISTS (SELECT 1 FROM langgraph_checkpoint c WHERE c.thread_id = w.thread_id
                           AND c.checkpoint_ns = w.checkpoint_ns
                           AND c.checkpoint_id = w.checkpoint_id)""",
    """DELETE FROM langgraph_checkpoint_blob b WHERE b.thread_id = ANY($1::text[])
         AND NOT EXISTS (SELECT 1 FROM langgraph_checkpoint c WHERE c.thread_id = b.thread_id
                           AND c.checkpoint_ns = b.checkpoint_ns
                           AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version)""",
)

DELETE_FOR_RUNS = """
DELETE FROM langgraph_checkpoint WHERE metadata ->> 'run_id' = ANY($1::text[])
RETURNING thread_id
"""

COPY_THREAD = (
    """INSERT INTO langgraph_checkpoint (thread_id, checkpoint_ns, checkpoint_id,
         parent_checkpoint_id, checkpoint, metadata, tether_run_id, tether_epoch)
       SELECT $2, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata,
              tether_run_id, tether_epoch
         FROM langgraph_checkpoint WHERE thread_id = $1
       ON CONFLICT DO NOTHING""",
    """INSERT INTO langgraph_checkpoint_blob (thread_id, checkpoint_ns, channel, version, type,
         blob)
       SELECT $2, checkpoint_ns, channel, version, type, blob
         FROM langgraph_checkpoint_blob WHERE thread_id = $1
       ON CONFLICT DO NOTHING""",
    """INSERT INTO langgraph_checkpoint_write (thread_id, checkpoint_ns, checkpoint_id, task_id,
         task_path, idx, channel, type, blob)
       SELECT $2, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob
         FROM langgraph_checkpoint_write WHERE thread_id = $1
       ON CONFLICT DO NOTHING""",
)

# Keep the newest checkpoint of each (thread, namespace).
_OLDER = """FROM langgraph_checkpoint c WHERE c.thread_id = ANY($1::text[])
   AND c.checkpoint_id < (SELECT max(m.checkpoint_id) FROM langgraph_checkpoint m
                           WHERE m.thread_id = c.thread_id
                             AND m.checkpoint_ns = c.checkpoint_ns)"""
# Threads whose graph uses DeltaChannel (LangGraph records its counters in the metadata): their
# newest checkpoint may need its ancestors to rebuild a channel.
DELTA_THREADS = """SELECT DISTINCT m.thread_id FROM langgraph_checkpoint m
 WHERE m.thread_id = ANY($1::text[]) AND m.metadata ? 'counters_since_delta_snapshot'"""
DELETE_OLDER = f"DELETE {_OLDER}"
