"""The straggler study of ``benchmarks/stragglers.py``: round policies x seeds (x attack
fraction) on a large device population.

Modules: :mod:`.cli` (the command line), :mod:`.core` (one run, the study's cells),
:mod:`.saved` (a finished run's ``cell.json`` for ``--resume``), :mod:`.mixes` (every device's
dominant class for ``--speed-label-skew``),
:mod:`.scenarios` (the seed papers' fidelity cases), :mod:`.report` (metrics and records from the
round events), :mod:`.output` (table, results.json / results.csv), :mod:`.plots` (the PNGs) and
:mod:`.main` (the script's ``main``).
"""
