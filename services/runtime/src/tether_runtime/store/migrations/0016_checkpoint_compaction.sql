-- A finished run's checkpoint compacted (issue 18): once a run has been completed, failed or
-- cancelled for TETHER_CHECKPOINT_COMPACT_AFTER_S, the workers' sweep replaces its checkpoint
-- (the whole transcript the model saw) with what GetRun and the audit need: the usage figures
-- and the answer's message id. The flag is a column, not a test on the jsonb, so the index's
-- predicate never detoasts a checkpoint on the hot updates (claim, renew, save).
ALTER TABLE run ADD COLUMN checkpoint_compacted boolean NOT NULL DEFAULT false;
CREATE INDEX run_compactable_idx ON run (updated_at)
    WHERE status IN ('completed', 'failed', 'cancelled') AND NOT checkpoint_compacted;
