"""Executing runs: workers, the run loop, model steps, the tool-call machines, checkpoints, questions, resume, the driven-agent host."""
