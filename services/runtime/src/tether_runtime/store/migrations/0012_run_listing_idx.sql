-- ListRuns filters (issue 18): each filter a page can be read through with an index, newest
-- first (run ids sort by creation). A user's runs of one agent or one status walk these from
-- the newest; an admin listing every user's runs walks the primary key, or run_created_idx for a
-- time range. `agent` never changes and `status` is already in run_claimable_idx's predicate,
-- so neither index costs an update a HOT path it had.
CREATE INDEX run_user_agent_idx ON run (user_id, agent, id DESC);
CREATE INDEX run_user_status_idx ON run (user_id, status, id DESC);
CREATE INDEX run_created_idx ON run (created_at, id);
