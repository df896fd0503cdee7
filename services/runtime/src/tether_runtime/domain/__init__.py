"""The shapes every layer shares: run events (the one place the event schema is built), the rows the store reads and the views of runs, interrupts and agents."""
