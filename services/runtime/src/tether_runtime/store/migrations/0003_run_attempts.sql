-- Poison-run protection. `attempts` counts the claims of a run since it last paused or started
-- fresh: every claim adds one, a pause or an end sets it back to 0, and a graceful release gives
-- the claim back. A run whose lease ran out more than once may be claimed again only once a
-- backoff that grows with `attempts` has passed, and a claim that finds the attempts spent fails the run instead of
-- executing it (store/runs.py `claim_batch`, poison.py).
ALTER TABLE run ADD COLUMN attempts integer NOT NULL DEFAULT 0;

-- `queued_at` is the run's place in the claim order (run_claimable_idx), and a claim now moves
-- it: to the moment the run would be claimable again if its worker died at once (claim time +
-- lease TTL + backoff). A run taken over after a crash therefore lines up behind the runs queued
-- before it became claimable again, instead of at the head of the queue by its first queue time;
-- for a run still queued it keeps its meaning, the time it was queued.
COMMENT ON COLUMN run.queued_at IS
    'place in the claim order: when queued; once claimed, when it would be claimable again';
COMMENT ON COLUMN run.attempts IS
    'claims since the run last paused or started fresh (a graceful release gives one back)';
