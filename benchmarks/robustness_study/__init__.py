"""The robustness grid of ``benchmarks/robustness.py``: every defense against one attack, over
malicious fractions and seeds.

Modules: :mod:`.cli` (the command line), :mod:`.grid` (scenarios, defense presets, the one-run
worker), :mod:`.core` (the grid's jobs and their pool), :mod:`.report` (table and plots) and
:mod:`.main` (the script's ``main``).
"""
