"""The scheduler benchmark of ``benchmarks/scheduler.py``: placement search on standard
instances, chunk-time prediction on FedSentry's own chunks, and live rounds under each placement.

Modules: :mod:`.cli` (the command line), :mod:`.instances` (Braun's instances against the LP
bound; also runnable alone), :mod:`.live` (the recorded runs and the live records),
:mod:`.predictor` (chunk-time predictors and decision regret), :mod:`.core` (the parts' runs and
CSVs), :mod:`.plot` (the PNG) and :mod:`.main` (the script's ``main``).
"""
