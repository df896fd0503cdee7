-- Token usage per run (issue #14). The checkpoint holds it, written by the same statements that
-- save the state the tokens produced; these generated columns make it queryable and indexable
-- (`SELECT agent, sum(input_tokens) ...`) without a second write path.
ALTER TABLE run
  ADD COLUMN input_tokens bigint
    GENERATED ALWAYS AS (coalesce((checkpoint ->> 'input_tokens')::bigint, 0)) STORED,
  ADD COLUMN output_tokens bigint
    GENERATED ALWAYS AS (coalesce((checkpoint ->> 'output_tokens')::bigint, 0)) STORED;
