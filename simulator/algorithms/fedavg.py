"""FedAvg (McMahan et al., AISTATS 2017): local SGD, sample-weighted averaging of updates.

The protocol's defaults are FedAvg (:class:`~simulator.algorithms.base.Algorithm`); the weighting
lives in the default defense (``defenses/fedavg.py``) so robust rules can replace it.
"""

from simulator.algorithms import register
from simulator.algorithms.base import Algorithm


@register
class FedAvg(Algorithm):
    name = "fedavg"
