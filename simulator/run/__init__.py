"""Running an experiment: building the federation and executor from a config, the memory
budget check, outputs (event log, summary, plots) and resume."""
