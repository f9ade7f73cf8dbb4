"""The heterogeneity benchmark of ``benchmarks/heterogeneity.py``: does each seed paper's claim
reproduce on FedSentry?

Modules: :mod:`.cases` (one file per claim, registered and discovered), :mod:`.core` (runs,
metrics, verdicts), :mod:`.cli` (the command line), :mod:`.output` (table and CSV),
:mod:`.plots` (one PNG per case) and :mod:`.main` (the script's ``main``).
"""
