-- A migration that breaks the previous release, on purpose (test_release_compat): the release's
-- code reads and writes run.checkpoint, so renaming it in place (instead of adding the new column,
-- writing both, and dropping the old one a release later) fails its runs.
ALTER TABLE run RENAME COLUMN checkpoint TO state;
