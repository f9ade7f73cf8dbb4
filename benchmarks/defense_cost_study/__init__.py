"""The defense-cost study behind ``benchmarks/defense_cost.py``: every rule's aggregation time
at cohort scale against the exact reference code and ByzFL."""
