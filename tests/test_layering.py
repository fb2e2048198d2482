"""Imports point one way: data -> encoders -> models -> triggers -> rounds -> detectors -> scoring -> dynamic
-> leaderboard."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "trojanscope"
LAYERS = ["data", "encoders", "models", "triggers", "rounds", "detectors", "scoring", "dynamic", "leaderboard"]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("layer", LAYERS)
def test_no_upward_imports(layer: str) -> None:
    allowed_above = set(LAYERS[: LAYERS.index(layer) + 1])
    bad = []
    for path in (SRC / layer).rglob("*.py"):
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] == "trojanscope" and len(parts) > 1 and parts[1] in LAYERS and parts[1] not in allowed_above:
                bad.append(f"{path.relative_to(SRC)} imports {name}")
    assert not bad, "upward imports break the one-way flow:\n" + "\n".join(bad)
