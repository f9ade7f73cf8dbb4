"""Bytes on the wire of the algorithms that send more than the model: SCAFFOLD (c down, Delta c
up), FedUFO (posterior and counts up, peers down) and FedFM / FedFM-Lite (anchors and counts up,
anchors down), by hand on tiny layouts and through real runs' events.jsonl."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from simulator.algorithms import Algorithm, WireInfo, make_algorithm
from simulator.config.learning import AlgorithmConfig
from simulator.config.sections import Config
from simulator.run.experiment import run_experiment
from simulator.run.output import read_events

MakeConfig = Callable[..., Config]
IDS = np.array([1, 4, 7])  # three selected clients


def alg(name: str, **params: Any) -> Algorithm:
    return make_algorithm(AlgorithmConfig(algorithm=name, algorithm_params=params))


def layout(**numels: int) -> dict[str, slice]:
    """Slices of a flat model whose named tensors have ``numels`` entries, in order."""
    out, at = {}, 0
    for name, n in numels.items():
        out[name.replace("__", ".")] = slice(at, at + n)
        at += n
    return out


def info(slices: dict[str, slice], classes: int, server: dict | None = None) -> WireInfo:
    size = sum(s.stop - s.start for s in slices.values())
    return WireInfo(IDS, size, classes, lambda: np.zeros((3, classes)), slices, size, server or {})


def per_client(up: np.ndarray, down: np.ndarray) -> tuple[float, float]:
    assert up.shape == down.shape == (3,) and len(set(up)) == len(set(down)) == 1
    return float(up[0]), float(down[0])


# ----------------------------------------------------------------------------- by hand


def test_scaffold_sends_twice_the_model_each_way() -> None:
    # P = 6 + 2 = 8 trainable entries: model + c down, update + Delta c up = 2 * 4 * 8 = 64
    w = info(layout(fc__weight=6, fc__bias=2), 2)
    assert per_client(*alg("scaffold").wire_bytes(w)) == (64.0, 64.0)
    # with BatchNorm the running statistics travel with the model but carry no control variate:
    # S = 6 + 2 + 2 + 2 + 2 = 14, T = 10: 4 * (14 + 10) = 96 each way
    bn = layout(fc__weight=6, bn__weight=2, bn__bias=2, bn__running_mean=2, bn__running_var=2)
    assert per_client(*alg("scaffold").wire_bytes(info(bn, 2))) == (96.0, 96.0)


def test_fedufo_uploads_its_posterior_and_downloads_its_peers() -> None:
    # S = T = 20 (body 12, head 6, disc 2), C = 3 classes, disc_classes 4 (5 outputs)
    w = layout(body__weight=12, head__weight=6, disc__bias=2)
    a = alg("fedufo", disc_classes=4, peers=2)
    server = a.init_server(torch.zeros(20), 20)  # round 0: no peers; the stage scalar
    up, down = per_client(*a.wire_bytes(info(w, 3, server)))
    assert (up, down) == (4.0 * (20 + 20 + 3), 4.0 * (20 + 1))  # 172, 84
    # two peers held: [2, 20] models, [2, 5] one-hot labels, [2, 3] class shares, the stage
    server = {
        "peers": torch.zeros(2, 20),
        "peer_labels": torch.zeros(2, 5),
        "peer_shares": torch.zeros(2, 3),
        "stage": torch.tensor(0.0),
    }
    assert per_client(*a.wire_bytes(info(w, 3, server)))[1] == 4.0 * (20 + 2 * (20 + 5 + 3) + 1)
    # dynamic sampling adds the accuracy (one float); without uad and cgr no posterior travels
    dyn = alg("fedufo", disc_classes=4, dynamic_sampling=True)
    assert per_client(*dyn.wire_bytes(info(w, 3, server)))[0] == 4.0 * (20 + 20 + 3 + 1)
    assert per_client(*alg("fedufo", uad=0.0, cgr=0.0).wire_bytes(info(w, 3)))[0] == 80.0


@pytest.mark.parametrize("name", ["fedfm", "fedfm_lite"])
def test_fedfm_sends_anchors_and_counts(name: str) -> None:
    # input 4 -> d = 3 features -> C = 2 classes: S = 12 + 3 + 6 + 2 = 23, anchors C * d = 6
    w = layout(body__weight=12, body__bias=3, head__weight=6, head__bias=2)
    a = alg(name)
    fresh = a.init_server(torch.zeros(23), 23)  # no anchors yet: the model and the weight
    assert per_client(*a.wire_bytes(info(w, 2, fresh))) == (4.0 * (23 + 6 + 2), 4.0 * (23 + 1))
    held = {"anchors": torch.zeros(2, 3), "fm_weight": torch.ones(1)}
    assert per_client(*a.wire_bytes(info(w, 2, held)))[1] == 4.0 * (23 + 6 + 1)  # 120
    with pytest.raises(ValueError, match="linear head"):
        a.wire_bytes(info(layout(body__weight=4), 2))


# ----------------------------------------------------------------------------- real runs


# the small config's model: an MLP on digits (64 inputs), two hidden layers of 16, 10 classes
P = (64 * 16 + 16) + (16 * 16 + 16) + (16 * 10 + 10)  # 1482 trainable entries, no buffers
C, D = 10, 16  # classes, feature width (the head's input)


def events(cfg: Config) -> list[dict[str, Any]]:
    run_experiment(cfg)
    return read_events(Path(cfg.output.out) / "events.jsonl")


def test_scaffold_run_counts_c_in_events(make_config: MakeConfig) -> None:
    evs = events(make_config(algorithm="scaffold", rounds=2))
    for e in evs:  # 2 * 4 * 1482 = 11,856 bytes per client each way
        assert e["upload_bytes_uncompressed"] == len(e["participants"]) * 2 * 4 * P
        assert e["download_bytes_uncompressed"] == len(e["selected"]) * 2 * 4 * P
        assert e["upload_bytes"] == e["upload_bytes_uncompressed"]


def test_scaffold_extras_stay_dense_under_a_mask(make_config: MakeConfig) -> None:
    mask = {"compression": "mask", "compression_params": {"rate": 0.25, "direction": "up"}}
    evs = events(make_config(algorithm="scaffold", rounds=1, **mask))
    sparse = math.ceil(P / 8) + 4 * math.ceil(P / 4)  # the masked update (bitmap + values)
    k = len(evs[0]["participants"])
    assert evs[0]["upload_bytes"] == k * (sparse + 4 * P)  # Delta c whole
    assert evs[0]["upload_bytes_uncompressed"] == k * 8 * P


def test_fedufo_run_counts_posteriors_and_peers(make_config: MakeConfig) -> None:
    params = {"peers": 2, "disc_classes": 8}
    evs = events(make_config(algorithm="fedufo", rounds=2, algorithm_params=params))
    t = P + (16 * 16 + 16) + (16 * 9 + 9)  # the discriminator: 16 -> 16 -> 8 + 1 outputs
    for e in evs:  # the update, the posterior, the counts
        assert e["upload_bytes_uncompressed"] == len(e["participants"]) * 4 * (t + t + C)
    m = min(2, len(evs[0]["participants"]))  # round 0's kept posteriors become round 1's peers
    assert evs[0]["download_bytes_uncompressed"] == len(evs[0]["selected"]) * 4 * (t + 1)
    per = 4 * (t + m * (t + 9 + C) + 1)
    assert evs[1]["download_bytes_uncompressed"] == len(evs[1]["selected"]) * per


@pytest.mark.parametrize("name", ["fedfm", "fedfm_lite"])
def test_fedfm_run_counts_anchors(make_config: MakeConfig, name: str) -> None:
    evs = events(make_config(algorithm=name, rounds=2))
    for e in evs:  # the update, C anchors of D entries, C counts
        assert e["upload_bytes_uncompressed"] == len(e["participants"]) * 4 * (P + C * D + C)
    assert evs[0]["download_bytes_uncompressed"] == len(evs[0]["selected"]) * 4 * (P + 1)
    assert evs[1]["download_bytes_uncompressed"] == len(evs[1]["selected"]) * 4 * (P + C * D + 1)
