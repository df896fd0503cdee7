"""MCP servers as tools: `effects.py` derives each tool's effect from its annotations and the
agent's overrides, `tools.py` makes an MCP tool a Tool the engine calls like any other (the same
gate, cards and write-call machine), `sessions.py` holds one client session per server per
process, `hub.py` connects an agent's servers when it loads."""
