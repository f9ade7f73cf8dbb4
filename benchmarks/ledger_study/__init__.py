"""The ledger study of ``benchmarks/ledger_audit.py``: what FLChain recording costs a run, how
fast the audit is, what it catches.

Modules: :mod:`.cli` (the command line), :mod:`.tasks` (the tasks and their recorded runs),
:mod:`.audit_speed` (the audit's throughput), :mod:`.tamper_study` (the tamper table) and
:mod:`.main` (the script's ``main`` and its report).
"""
