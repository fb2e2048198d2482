"""TriggerSpec validation and its config.json record."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from trojanscope.errors import ConfigError
from trojanscope.triggers import TriggerSpec

OK = TriggerSpec(type="word", text="omg", source_class=0, target_class=1, fraction=0.1)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"type": "emoji"}, "type="),
        ({"text": ""}, "text="),
        ({"text": " omg"}, "text="),
        ({"text": "a\nb"}, "text="),
        ({"source_class": 2}, "source_class="),
        ({"source_class": -1}, "source_class="),
        ({"source_class": True}, "source_class="),
        ({"target_class": 5}, "target_class="),
        ({"target_class": 0}, "target_class="),
        ({"fraction": 0.0}, "fraction="),
        ({"fraction": 1.5}, "fraction="),
        ({"fraction": float("nan")}, "fraction="),
        ({"fraction": "0.1"}, "fraction="),
        ({"condition": "temporal"}, "condition="),
        ({"condition": "spatial"}, "spatial_half="),
        ({"condition": "spatial", "spatial_half": "middle"}, "spatial_half="),
        ({"condition": "class", "spatial_half": "first"}, "spatial_half="),
    ],
)
def test_validate_names_the_bad_field(changes: dict, field: str) -> None:
    spec = dataclasses.replace(OK, **changes)
    with pytest.raises(ConfigError, match=field) as info:
        spec.validate(n_classes=2)
    assert "\n" not in str(info.value)  # one line, even for a text with a newline


def test_valid_specs_pass() -> None:
    OK.validate(2)
    dataclasses.replace(OK, condition="spatial", spatial_half="second", fraction=1).validate(2)
    dataclasses.replace(OK, condition="class", source_class=np.int64(2), target_class=np.int64(0)).validate(3)


def test_where_it_fires() -> None:
    assert OK.firing_where() == "any" and OK.spurious_where() is None
    first = dataclasses.replace(OK, condition="spatial", spatial_half="first")
    assert first.firing_where() == "first" and first.spurious_where() == "second"
    second = dataclasses.replace(OK, condition="spatial", spatial_half="second")
    assert second.firing_where() == "second" and second.spurious_where() == "first"
    cls = dataclasses.replace(OK, condition="class")
    assert cls.firing_where() == "any" and cls.spurious_where() == "any"


def test_record_round_trip() -> None:
    spec = dataclasses.replace(OK, condition="spatial", spatial_half="first")
    record = spec.to_dict()
    assert record == {
        "type": "word",
        "text": "omg",
        "source_class": 0,
        "target_class": 1,
        "fraction": 0.1,
        "condition": "spatial",
        "spatial_half": "first",
    }
    assert TriggerSpec.from_dict(record) == spec
    with pytest.raises(ConfigError, match="unknown keys \\['colour'\\]"):
        TriggerSpec.from_dict({**record, "colour": "red"})
    with pytest.raises(ConfigError, match="misses keys \\['fraction'\\]"):
        TriggerSpec.from_dict({k: v for k, v in record.items() if k != "fraction"})
