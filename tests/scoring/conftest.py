"""Fixtures of the scoring tests: a session-wide fake zoo and detector scripts."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from scoring_zoo import make_zoo


@pytest.fixture(scope="session")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_zoo(tmp_path_factory.mktemp("zoo"))


@pytest.fixture(scope="session")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Command lines of subprocess detectors that follow (or break) the TrojAI contract."""
    d = tmp_path_factory.mktemp("scripts")
    bodies = {
        "crash": "raise SystemExit('detector exploded')",
        "hang": "import time; time.sleep(600)",
        "garbage": "open(a.result_filepath, 'w').write('probably trojaned!')",
        "nothing": "pass",
        "outofrange": "open(a.result_filepath, 'w').write('1.7')",
        "args": textwrap.dedent("""
            import json, os, sys
            seen = sorted(str(p) for p in __import__('pathlib').Path(a.model_filepath).parent.rglob('*'))
            with open(os.environ['ARGV_LOG'], 'a') as fh:
                fh.write(json.dumps({'argv': sys.argv, 'seen': seen}) + '\\n')
            open(a.result_filepath, 'w').write('0.3')"""),
    }
    out = {}
    for name, body in bodies.items():
        path = d / f"{name}.py"
        path.write_text(textwrap.dedent("""
            import argparse
            p = argparse.ArgumentParser()
            for k in ("model_filepath", "result_filepath", "scratch_dirpath", "examples_dirpath",
                      "tokenizer_filepath", "embedding_filepath"):
                p.add_argument("--" + k)
            p.add_argument("--cls_token_is_first", action="store_true")
            a = p.parse_args()
        """) + textwrap.dedent(body) + "\n")
        out[name] = f"{sys.executable} {path}"
    return out
