"""The throughput study behind ``benchmarks/throughput.py``: client updates per second of
FedSentry, Flower's simulation and the fused ceiling (``benchmarks/fused.py``) on identical
tasks."""
