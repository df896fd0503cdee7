-- Token usage per run (issue #14), queryable (`SELECT agent, sum(input_tokens) ...`). The
-- checkpoint holds the figures; the statements that save a checkpoint copy them here. Plain
-- columns, not generated ones: a generated column would be recomputed, detoasting the whole
-- checkpoint, by every update of the run row (one per committed event batch).
ALTER TABLE run
  ADD COLUMN input_tokens bigint NOT NULL DEFAULT 0,
  ADD COLUMN output_tokens bigint NOT NULL DEFAULT 0;
