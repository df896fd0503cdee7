"""The agent inside a run: its context, compaction, summaries and token counts."""
