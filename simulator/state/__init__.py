"""The client-state store: every per-client row an algorithm or defense keeps between rounds,
in RAM up to a budget, spilled to disk beyond it, checkpointed incrementally."""
