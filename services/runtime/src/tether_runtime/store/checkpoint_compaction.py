"""Compacting finished runs' checkpoints (migration 0016): the transcript goes, the figures
`GetRun` reports stay (steps, tokens, per-step usage, execution time) with the answer's message
id. The transcript itself lives on in `message` (the conversation) and `run_event` (the run's
log), so nothing a reader of a finished run uses is lost. Any number of pods may run it at once:
each batch locks its rows with SKIP LOCKED."""

from __future__ import annotations

from tether_runtime.store.db import Conn

BATCH = 200

_KEPT = ("v", "message_id", "steps", "input_tokens", "output_tokens", "step_usage", "active_s")
# A graph run's final state (GetRun's output_json) stays too; a native run's, "", is dropped.
_OUTPUT = """'output', nullif(checkpoint -> 'output', '""'::jsonb)"""

_COMPACT = f"""
UPDATE run SET checkpoint_compacted = true,
       checkpoint = jsonb_strip_nulls(jsonb_build_object(
           'compacted', true, 'started', true,
           {", ".join(f"'{k}', checkpoint -> '{k}'" for k in _KEPT)}, {_OUTPUT}))
WHERE id IN (
    SELECT id FROM run
    WHERE status IN ('completed', 'failed', 'cancelled') AND NOT checkpoint_compacted
      AND updated_at < now() - make_interval(secs => $1)
    ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED)
"""


async def compact(conn: Conn, older_than_s: float, batch: int = BATCH) -> int:
    """Compact up to `batch` runs finished more than `older_than_s` ago; returns how many."""
    result = await conn.execute(_COMPACT, older_than_s, batch)
    return int(str(result).rsplit(" ", 1)[-1])
