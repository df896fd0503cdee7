"""An ops graph."""
