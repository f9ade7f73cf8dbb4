"""Byzantine attacks, one module each, registered by name.

``none`` is the only entry until the attack modules land (robustness issue); the registry exists
now so that an unknown ``--attack`` fails at once instead of silently running a clean experiment.
"""

ATTACKS: dict[str, object] = {"none": None}

__all__ = ["ATTACKS"]
