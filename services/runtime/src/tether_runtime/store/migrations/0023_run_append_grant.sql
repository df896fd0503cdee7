-- The fenced append checks the grant a read tool declares (issue 34): the read claim that rides
-- the append with its `tool_started` (store/event_log.py ReadClaim) carries the action and scope
-- the tool needs, and the claim is written only if the run's user holds them, read in the same
-- statement as policy.granted reads them (the `grant` table at that moment, nothing cached; the
-- scope matched as store/grants.py matches_sql does). A run whose claim its user may not make has
-- nothing of its append written and comes back with o_denied (its lease and position held); one
-- whose lease or position did not hold is absent, as before. This was one statement more per
-- read call: the grant check's own round trip before the claim.
--
-- A new overload: $33 and $34 are the claims' actions (NULL: the tool declares none) and scopes,
-- beside $12-$16. The 32-parameter function of 0020 stays for the workers of the release before,
-- which call it during a rolling upgrade.
CREATE FUNCTION run_append(
    text[], bigint[], bigint[], bigint[], bigint[],     -- $1-$5: the runs' fence
    text[], bigint[], text[], bytea[],                  -- $6-$9: the events
    text[], boolean[],                                  -- $10-$11: checkpoint, reset
    text[], text[], text[], text[], text[],             -- $12-$16: read claims
    text[],                                             -- $17: end status
    text[], text[], boolean[], text[], text[],          -- $18-$22: call finishes
    text[], text[],                                     -- $23-$24: facts
    text[], text[], text[],                             -- $25-$27: answers
    text[], text[], text[], text[], text[],             -- $28-$32: webhook deliveries
    text[], text[]                                      -- $33-$34: read claims' grant
) RETURNS TABLE (o_id text, o_cancel boolean, o_denied boolean) LANGUAGE plpgsql AS $fn$
BEGIN
    RETURN QUERY
    WITH v AS (
        SELECT id, epoch, expected, new_last, streamed, cp::jsonb AS cp, reset, end_status
        FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $10::text[],
                    $11::boolean[], $17::text[])
            AS v(id, epoch, expected, new_last, streamed, cp, reset, end_status)
    ), refused AS (
        -- The runs whose read claim needs a grant their user does not hold.
        SELECT q.run_id AS id
        FROM unnest($12::text[], $33::text[], $34::text[]) AS q(run_id, action, scope)
        JOIN run r ON r.id = q.run_id
        WHERE q.action IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM "grant" g
            WHERE g.user_id = r.user_id AND g.action = q.action
              AND (g.scope = '*' OR (
                  cardinality(string_to_array(g.scope, '/'))
                      = cardinality(string_to_array(q.scope, '/'))
                  AND NOT EXISTS (
                      SELECT 1 FROM unnest(string_to_array(g.scope, '/'),
                                           string_to_array(q.scope, '/')) AS seg(want, have)
                      WHERE seg.want <> '*' AND seg.want IS DISTINCT FROM seg.have))))
    ), fence AS (
        -- A checkpoint saved with the events (RunWriter: a commit whose only state changes are the
        -- run's own) is applied as runs.save_checkpoint would, after the deltas are counted; an end
        -- as runs.finish would.
        UPDATE run r SET last_sequence = v.new_last,
               step_streamed = CASE WHEN v.reset THEN 0 ELSE r.step_streamed + v.streamed END,
               checkpoint = coalesce(v.cp, r.checkpoint),
               input_tokens = CASE WHEN v.cp IS NULL THEN r.input_tokens
                                   ELSE coalesce((v.cp ->> 'input_tokens')::bigint, 0) END,
               output_tokens = CASE WHEN v.cp IS NULL THEN r.output_tokens
                                    ELSE coalesce((v.cp ->> 'output_tokens')::bigint, 0) END,
               status = coalesce(v.end_status, r.status),
               lease_owner = CASE WHEN v.end_status IS NULL THEN r.lease_owner END,
               lease_expires_at = CASE WHEN v.end_status IS NULL THEN r.lease_expires_at END,
               attempts = CASE WHEN v.end_status IS NULL THEN r.attempts ELSE 0 END,
               updated_at = now()
        FROM v
        WHERE r.id = v.id AND r.lease_epoch = v.epoch AND r.status = 'running'
          AND r.last_sequence = v.expected AND r.id NOT IN (SELECT id FROM refused)
        RETURNING r.id, r.cancel_requested, r.conversation_id, r.user_id, r.agent
    ), ins AS (
        INSERT INTO run_event (run_id, sequence, type, data)
        SELECT e.run_id, e.s, e.t, e.d
        FROM unnest($6::text[], $7::bigint[], $8::text[], $9::bytea[]) AS e(run_id, s, t, d)
        JOIN fence ON fence.id = e.run_id
        RETURNING 1
    ), claim AS (
        -- Read-only tool calls claimed with their tool_started (LeaseAppend.read_claim): the same
        -- insert as interrupts.claim_call(..., "new"), for the runs whose fence held.
        INSERT INTO tool_call (run_id, call_id, tool, args, status, idempotency_key, claimed_epoch)
        SELECT c.run_id, c.call_id, c.tool, c.args::jsonb, 'executing', c.key, v.epoch
        FROM unnest($12::text[], $13::text[], $14::text[], $15::text[], $16::text[])
            AS c(run_id, call_id, tool, args, key)
        JOIN fence ON fence.id = c.run_id
        JOIN v ON v.id = c.run_id
        ON CONFLICT (run_id, call_id) DO UPDATE SET claimed_epoch = EXCLUDED.claimed_epoch,
            updated_at = now() WHERE tool_call.status = 'executing'
        RETURNING 1
    ), finish AS (
        -- Calls' results (LeaseAppend.call_finish), as interrupts.finish_call: this epoch's claim.
        UPDATE tool_call t SET status = CASE WHEN f.ok THEN 'succeeded' ELSE 'failed' END,
               result_summary = f.summary, result = f.result::jsonb, updated_at = now()
        FROM unnest($18::text[], $19::text[], $20::boolean[], $21::text[], $22::text[])
            AS f(run_id, call_id, ok, summary, result)
        JOIN fence ON fence.id = f.run_id
        JOIN v ON v.id = f.run_id
        WHERE t.run_id = f.run_id AND t.call_id = f.call_id AND t.claimed_epoch = v.epoch
        RETURNING 1
    ), facts AS (
        -- Confirmed facts, as conversations.merge_facts. Runs of one conversation in the same
        -- statement are merged into one update of its row (a row is updated once per statement),
        -- later keys winning, one version each.
        UPDATE conversation c SET facts = c.facts || m.merged, version = c.version + m.n,
               updated_at = now()
        FROM (SELECT fence.conversation_id AS id, count(DISTINCT f.ord) AS n,
                     jsonb_object_agg(kv.key, kv.value ORDER BY f.ord) AS merged
              FROM unnest($23::text[], $24::text[]) WITH ORDINALITY AS f(run_id, facts, ord)
              JOIN fence ON fence.id = f.run_id
              CROSS JOIN LATERAL jsonb_each(f.facts::jsonb) AS kv
              GROUP BY fence.conversation_id) m
        WHERE c.id = m.id
        RETURNING 1
    ), answer AS (
        -- The assistant's answer of a run that completes, as conversations.add_message.
        INSERT INTO message (id, conversation_id, run_id, role, content)
        SELECT m.id, fence.conversation_id, m.run_id, 'assistant', m.content
        FROM unnest($25::text[], $26::text[], $27::text[]) AS m(run_id, id, content)
        JOIN fence ON fence.id = m.run_id
        ON CONFLICT (id) DO UPDATE SET content = EXCLUDED.content
        RETURNING 1
    ), hooks AS (
        -- As store/outbox.py deliveries_sql(28, "fence").
        INSERT INTO webhook_delivery (id, event_id, event_type, endpoint_id, run_id, payload)
        SELECT v.event_id || '@' || ep.id, v.event_id, v.event_type, ep.id, r.id,
               jsonb_build_object(
                   'id', v.event_id, 'type', v.event_type, 'createdAt', v.created_at,
                   'data', jsonb_build_object('conversationId', r.conversation_id,
                                              'userId', r.user_id, 'agent', r.agent)
                           || v.data::jsonb)
        FROM unnest($28::text[], $29::text[], $30::text[], $31::text[], $32::text[])
            AS v(run_id, event_id, event_type, created_at, data)
        JOIN webhook_endpoint ep ON ep.enabled AND v.event_type = ANY(ep.events)
        JOIN fence r ON r.id = v.run_id
        ON CONFLICT (event_id, endpoint_id) DO NOTHING
        RETURNING 1
    )
    SELECT id, cancel_requested, false FROM fence
    UNION ALL
    -- A refused run whose lease and position held: denied, not fenced.
    SELECT r.id, r.cancel_requested, true
    FROM v JOIN run r ON r.id = v.id
    WHERE v.id IN (SELECT id FROM refused) AND r.lease_epoch = v.epoch
      AND r.status = 'running' AND r.last_sequence = v.expected;
END
$fn$;
