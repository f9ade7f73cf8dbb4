"""FedAvg (McMahan et al., AISTATS 2017): local SGD, sample-weighted averaging of updates.

The base :class:`~simulator.algorithms.base.Algorithm` is FedAvg; the weighting lives in the
default defense (``defenses/fedavg.py``) so robust rules can replace it.
"""

from simulator.algorithms.base import Algorithm


class FedAvg(Algorithm):
    name = "fedavg"
