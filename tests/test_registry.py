"""The one parameter check every plugin kind goes through (:func:`simulator.registry.check_params`)
and the registry's dataclass helpers, on vectors whose messages can be read off by hand."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.registry import Registry, UnknownName, check_params


@pytest.mark.parametrize(
    ("given", "valid", "required", "message"),
    [
        # the first unknown name in sorted order, the valid ones sorted
        (["z", "b", "a"], ["a"], (), "kind 'x': unknown parameter 'b'; valid: ['a']"),
        (["m"], [], (), "kind 'x': unknown parameter 'm'; valid: []"),
        # unknown before missing
        (["q"], ["p", "r"], ["p"], "kind 'x': unknown parameter 'q'; valid: ['p', 'r']"),
        ([], ["r", "p"], ["r", "p"], "kind 'x': missing parameter 'p'; valid: ['p', 'r']"),
    ],
)
def test_check_params_names_the_first_bad_one(
    given: list[str], valid: list[str], required: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ValueError) as e:
        check_params("kind 'x'", given, valid, required)
    assert str(e.value) == message


def test_check_params_passes_and_raises_the_given_error() -> None:
    check_params("kind 'x'", ["a"], ["a", "b"], ["a"])  # nothing wrong: no error
    check_params("kind 'x'", {}, {"a": 1})  # a dict's keys are its names

    class Bad(Exception):
        pass

    with pytest.raises(Bad, match="^kind 'x': unknown parameter 'c'"):
        check_params("kind 'x'", ["c"], ["a"], error=Bad)


def test_registry_builds_a_dataclass_plugin() -> None:
    reg: Registry[type] = Registry("gadget")

    @reg.register("box")
    @dataclasses.dataclass
    class Box:
        side: int
        lid: bool = True

    assert reg.parameters("box") == {"side": dataclasses.MISSING, "lid": True}
    assert reg.build("box", side=3) == Box(3, True)
    with pytest.raises(
        ValueError, match=r"^gadget 'box': missing parameter 'side'; valid: \['lid', 'side'\]$"
    ):
        reg.build("box")
    with pytest.raises(
        ValueError, match=r"^gadget 'box': unknown parameter 'top'; valid: \['lid', 'side'\]$"
    ):
        reg.build("box", side=1, top=2)
    with pytest.raises(UnknownName, match=r"^unknown gadget 'tin'; valid: \['box'\]$"):
        reg.build("tin")
