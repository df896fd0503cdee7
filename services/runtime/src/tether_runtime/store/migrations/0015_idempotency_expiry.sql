-- Idempotency keys expire after TETHER_IDEMPOTENCY_TTL_S (issue 18): the workers' cleanup
-- deletes the oldest expired keys in batches, walking this index.
CREATE INDEX idempotency_key_created_idx ON idempotency_key (created_at);
