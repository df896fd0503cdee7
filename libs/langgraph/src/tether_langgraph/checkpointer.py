"""LangGraph's checkpointer on Tether's Postgres, every write fenced by the run's lease epoch.

Interface (agreed with the LangGraph agent kind, issue #19):

    from tether_langgraph.checkpointer import LeaseLost, RunFence, TetherCheckpointer

    saver = TetherCheckpointer(pool)                             # unfenced: tools, conformance
    saver = TetherCheckpointer(pool, fence=RunFence(run_id, epoch))  # every write fenced
    run_saver = saver.fenced(run_id, epoch)                      # a fenced copy (same pool, serde)

    # or one process-wide saver, fenced per call through the run's config:
    config = {"configurable": {"thread_id": conversation_id, "checkpoint_ns": "",
                               "tether_run_id": run_id, "tether_epoch": epoch}}
    async for chunk in graph.astream(inputs, config, ...): ...

- `pool`: an asyncpg pool on Tether's database (the runtime's own pool works: the saver passes
  JSON as text, so the pool's codecs do not matter). Each write takes a connection of its own
  for one transaction: do not call the saver while holding, on another connection, a
  transaction that updated the `run` row (the fence check would wait for it).
- `thread_id` is Tether's conversation id; `checkpoint_ns` LangGraph's namespace ("" for the
  root graph, "node:task" for subgraphs).
- The fence: `config["configurable"]["tether_run_id"]` and `["tether_epoch"]` (both or neither;
  they win over the constructor's), else the constructor's `fence`, else none. A fenced write
  (aput, aput_writes, and the maintenance calls: adelete_thread, adelete_for_runs,
  acopy_thread, aprune) runs in one transaction that first locks the run row FOR SHARE where
  `lease_epoch` is the fence's epoch; if it is not (a takeover bumped it), it raises `LeaseLost`
  (a subclass of the runtime's `event_log.Fenced`, so a worker treats it as any lost lease) and
  writes nothing. The share lock holds off a takeover's claim until the write commits.
- Reads (aget_tuple, alist) are never fenced.
- Sync methods (get_tuple, list, put, ...) delegate to the async ones on the loop the saver was
  created on; called from that loop's own thread they raise (use the async methods there).

Tables (migration 0008_langgraph_checkpoints.sql): `langgraph_checkpoint` (one row per
checkpoint, the checkpoint without its channel values, metadata as jsonb, the fencing run and
epoch), `langgraph_checkpoint_blob` (channel values, one row per channel version, shared by the
checkpoints that did not change the channel), `langgraph_checkpoint_write` (pending writes).
"""
