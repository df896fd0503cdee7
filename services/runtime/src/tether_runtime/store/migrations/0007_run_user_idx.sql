-- ListRuns: a user's runs, newest first (run ids sort by creation), one page at a time.
CREATE INDEX run_user_idx ON run (user_id, id DESC);
