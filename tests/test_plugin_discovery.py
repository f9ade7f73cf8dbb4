"""A defense or an attack is one dropped-in file: it registers itself and is found by discovery.

Each test writes a small package under ``tmp_path`` whose modules decorate a class with
``@DEFENSES.register`` / ``@ATTACKS.register``, discovers it, and builds the new plugin through
:func:`defenses.make_defense` / :func:`attacks.make_attack`. The registries are swapped for
copies while a test runs, so the built-in ones never see the test's plugins.
"""

from __future__ import annotations

import copy
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

import attacks
import attacks.base
import defenses
import defenses.base
from attacks import AttackContext, make_attack
from defenses import DefenseContext, UpdateBatch, make_defense

PKG = "fedsentry_dropin_plugins"

RULES = '''
import torch

from defenses.base import DEFENSES, AggregateResult, Defense, Verdict
from defenses.bucketing import BucketableDefense


@DEFENSES.register
class MyRule(Defense):
    """The plain mean of the rows times ``scale``."""

    name = "myrule"

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale

    def aggregate(self, batch, ctx):
        k = len(batch)
        return AggregateResult(self.scale * batch.updates.mean(dim=0),
                               tuple(Verdict(int(c), True, 1 / k, float("nan"))
                                     for c in batch.client_ids))


@DEFENSES.register
class MyBucketRule(BucketableDefense):
    """Every entry of the aggregate is the number of rows the rule saw."""

    name = "mybucketrule"

    def aggregate(self, batch, ctx):
        k = len(batch)
        return AggregateResult(torch.full((batch.updates.shape[1],), float(k)),
                               tuple(Verdict(int(c), True, 1 / k, float("nan"))
                                     for c in batch.client_ids))
'''

ATTACK = '''
from attacks.base import ATTACKS, ModelAttack


@ATTACKS.register
class MyAttack(ModelAttack):
    """Send ``-k`` times the honest update."""

    name = "myattack"
    defaults = {"k": 1.0}

    def check(self) -> None:
        self.number("k")

    def attack(self, malicious, ctx):
        return -self.params["k"] * malicious
'''


@contextmanager
def dropped_in(tmp_path: Path, files: dict[str, str]) -> Iterator[None]:
    """Package ``PKG`` with ``files`` on ``sys.path``, and copies of the two registries in
    place of the real ones (restored on exit, with ``sys.modules``)."""
    pkg = tmp_path / PKG
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name, text in files.items():
        (pkg / name).write_text(textwrap.dedent(text))
    reg_d, reg_a = copy.deepcopy(defenses.DEFENSES), copy.deepcopy(attacks.ATTACKS)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.syspath_prepend(str(tmp_path))
            for mod in (defenses, defenses.base):
                mp.setattr(mod, "DEFENSES", reg_d)
            for mod in (attacks, attacks.base):
                mp.setattr(mod, "ATTACKS", reg_a)
            yield
    finally:
        for m in [m for m in sys.modules if m == PKG or m.startswith(PKG + ".")]:
            del sys.modules[m]


def rows(values: list[list[float]]) -> UpdateBatch:
    k = len(values)
    return UpdateBatch(
        torch.tensor(values, dtype=torch.float32),
        np.arange(10, 10 + k, dtype=np.int64),
        np.ones(k, np.int64),
        np.zeros(k, np.int64),
    )


BUILTIN_DEFENSES = [
    "bulyan",
    "centeredclip",
    "fedavg",
    "fltrust",
    "geomed",
    "krum",
    "median",
    "multikrum",
    "normclip",
    "sageflow",
    "siren",
    "trimmedmean",
]
BUILTIN_ATTACKS = [
    "alie",
    "backdoor",
    "gaussian",
    "ipm",
    "labelflip",
    "minmax",
    "minsum",
    "model_replacement",
    "none",
    "scale",
    "signflip",
]


def test_builtin_registries() -> None:
    assert defenses.DEFENSES.names() == BUILTIN_DEFENSES
    assert attacks.ATTACKS.names() == BUILTIN_ATTACKS


def test_a_dropped_in_defense_file_is_discovered(tmp_path: Path) -> None:
    with dropped_in(tmp_path, {"myrule.py": RULES}):
        assert "myrule" not in defenses.DEFENSES
        defenses.DEFENSES.discover(PKG)
        assert defenses.DEFENSES.names() == sorted(BUILTIN_DEFENSES + ["myrule", "mybucketrule"])
        # (1 + 3) / 2 = 2, (2 + 4) / 2 = 3; times 2
        res = make_defense("myrule", scale=2.0)(
            rows([[1.0, 2.0], [3.0, 4.0]]), DefenseContext(0, torch.zeros(2))
        )
        assert res.delta.tolist() == [4.0, 6.0]
        assert [(v.client_id, v.weight) for v in res.verdicts] == [(10, 0.5), (11, 0.5)]
        with pytest.raises(ValueError) as e:
            make_defense("nope")
        assert str(e.value) == (
            "defense: unknown 'nope'; valid: ['bulyan', 'centeredclip', 'fedavg', 'fltrust', "
            "'geomed', 'krum', 'median', 'multikrum', 'mybucketrule', 'myrule', 'normclip', "
            "'sageflow', 'siren', 'trimmedmean']"
        )
        with pytest.raises(ValueError) as e:
            make_defense("myrule", bucket=2)
        assert str(e.value) == "defense 'myrule': unknown parameter 'bucket'; valid: ['scale']"
    assert "myrule" not in defenses.DEFENSES and "myrule" not in defenses.base.DEFENSES


def test_a_dropped_in_bucketable_rule_takes_bucket(tmp_path: Path) -> None:
    with dropped_in(tmp_path, {"myrule.py": RULES}):
        defenses.DEFENSES.discover(PKG)
        assert not defenses.DEFENSES["myrule"].bucketable
        assert defenses.DEFENSES["mybucketrule"].bucketable
        four = rows([[1.0], [2.0], [3.0], [4.0]])
        ctx = DefenseContext(0, torch.zeros(1), rng=np.random.default_rng(0))
        assert make_defense("mybucketrule")(four, ctx).delta.tolist() == [4.0]
        # buckets of 2: the rule sees 2 bucket means; each client gets half its bucket's 1/2
        res = make_defense("mybucketrule", bucket=2)(four, ctx)
        assert res.delta.tolist() == [2.0]
        assert [v.weight for v in res.verdicts] == [0.25, 0.25, 0.25, 0.25]
        with pytest.raises(ValueError) as e:
            make_defense("mybucketrule", buckets=2)
        assert str(e.value) == (
            "defense 'mybucketrule': unknown parameter 'buckets'; "
            "valid: ['bucket', 'nnm', 'nnm_rank']"
        )


def test_a_dropped_in_attack_file_is_discovered(tmp_path: Path) -> None:
    with dropped_in(tmp_path, {"myattack.py": ATTACK}):
        assert "myattack" not in attacks.ATTACKS
        attacks.ATTACKS.discover(PKG)
        assert attacks.ATTACKS.names() == sorted(BUILTIN_ATTACKS + ["myattack"])
        attack = make_attack("myattack", k=3.0)
        assert attack is not None and attack.kind == "model"
        ctx = AttackContext(
            round=0,
            global_flat=torch.zeros(2),
            benign=torch.zeros(0, 2),
            num_byzantine=1,
            num_total=1,
            rng=np.random.default_rng(0),
        )
        assert attack(torch.tensor([[1.0, 2.0]]), ctx).tolist() == [[-3.0, -6.0]]
        with pytest.raises(ValueError) as e:
            make_attack("nope")
        assert str(e.value) == (
            "unknown attack 'nope'; valid: ['alie', 'backdoor', 'gaussian', 'ipm', 'labelflip', "
            "'minmax', 'minsum', 'model_replacement', 'myattack', 'none', 'scale', 'signflip']"
        )
        with pytest.raises(ValueError) as e:
            make_attack("myattack", j=1)
        assert str(e.value) == "attack 'myattack': unknown parameter 'j'; valid: ['k']"
    assert "myattack" not in attacks.ATTACKS and "myattack" not in attacks.base.ATTACKS
