-- The conversation's summary is written by the agent's model in the background; it covers every
-- user/assistant message up to and including `summary_through` ('' : none). Stored with a
-- compare-and-set on this cursor, so two pods never replace a newer summary with an older one.
ALTER TABLE conversation ADD COLUMN summary_through text NOT NULL DEFAULT '';
