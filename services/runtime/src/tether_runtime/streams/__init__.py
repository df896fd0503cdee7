"""A run's events on their way out: the one write path of a run, the event-only sink, and their fan-out (Redis)."""
