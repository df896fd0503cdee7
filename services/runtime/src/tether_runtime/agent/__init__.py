"""The agent inside a run: a model, a set of tools, a policy."""
