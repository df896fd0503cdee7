-- LangGraph graphs as agents (issue #19): the graph's checkpoints, written by
-- tether_langgraph.checkpointer.TetherCheckpointer. thread_id is the conversation id (no foreign
-- key: LangGraph's own tools and the conformance suite use threads of their own);
-- checkpoint_ns is LangGraph's namespace ('' for the root graph). Ids are compared bytewise
-- (COLLATE "C"): a checkpoint id is time-ordered, and the newest checkpoint is the greatest.
CREATE TABLE langgraph_checkpoint (
  thread_id text COLLATE "C" NOT NULL,
  checkpoint_ns text COLLATE "C" NOT NULL DEFAULT '',
  checkpoint_id text COLLATE "C" NOT NULL,
  parent_checkpoint_id text COLLATE "C",
  -- The checkpoint without its channel values (those are blobs), and its metadata (filterable).
  checkpoint jsonb NOT NULL,
  metadata jsonb NOT NULL DEFAULT '{}',
  -- The Tether run and lease epoch that wrote it (NULL when written unfenced).
  tether_run_id text,
  tether_epoch bigint,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
);

-- Channel values, one row per (channel, version): a checkpoint that did not change a channel
-- shares the previous checkpoint's row. `blob` is NULL for an empty channel.
CREATE TABLE langgraph_checkpoint_blob (
  thread_id text COLLATE "C" NOT NULL,
  checkpoint_ns text COLLATE "C" NOT NULL DEFAULT '',
  channel text COLLATE "C" NOT NULL,
  version text COLLATE "C" NOT NULL,
  type text NOT NULL,
  blob bytea,
  PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
);

-- Pending writes of the tasks of a checkpoint's next step (idx < 0: LangGraph's special
-- channels, error/interrupt/resume, which a task writes again in place).
CREATE TABLE langgraph_checkpoint_write (
  thread_id text COLLATE "C" NOT NULL,
  checkpoint_ns text COLLATE "C" NOT NULL DEFAULT '',
  checkpoint_id text COLLATE "C" NOT NULL,
  task_id text COLLATE "C" NOT NULL,
  idx integer NOT NULL,
  channel text NOT NULL,
  type text NOT NULL,
  blob bytea NOT NULL,
  task_path text COLLATE "C" NOT NULL DEFAULT '',
  PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
);

-- delete_for_runs: LangGraph's run id is in the metadata.
CREATE INDEX langgraph_checkpoint_run_idx ON langgraph_checkpoint ((metadata ->> 'run_id'));
