"""The cases of ``benchmarks/heterogeneity.py``: one module per seed claim, found automatically.

A case is added by dropping one file into this package that registers its :class:`Case` in
:data:`CASES` (``CASE = CASES.register(Case(...))``, both from :mod:`.base`); nothing else
changes. Importing this package discovers every module of it (``CASES.discover``); modules whose
name starts with ``_`` hold shared settings and are not cases. What a case declares:
:mod:`benchmarks.heterogeneity_study.cases.base`.
"""

from __future__ import annotations

from benchmarks.heterogeneity_study.cases.base import (
    CASES,
    METRICS,
    RUN_DEFAULTS,
    SCORED_METRICS,
    Case,
    CaseError,
    Comparison,
    versus,
)

CASES.discover(__name__)

__all__ = [
    "CASES",
    "METRICS",
    "RUN_DEFAULTS",
    "SCORED_METRICS",
    "Case",
    "CaseError",
    "Comparison",
    "versus",
]
