"""Helpers: tiny zoos built with trojanscope's own model store, toy detectors, submission archives."""

from __future__ import annotations

import io
import json
import tarfile
import textwrap
import zipfile
from pathlib import Path

ADMIN = "organiser-secret-token-for-tests"


def make_zoo(root: Path, n: int, *, seed: int = 0, reduced: bool = False) -> Path:
    """A zoo of ``n`` tiny Linear heads; odd-numbered models are 'poisoned' and carry a tell in their config.

    The tell (``embedding_max_length`` 64 vs 32) lets a toy detector score well without seeing labels.
    """
    import torch

    from trojanscope.models.architectures import HeadSpec
    from trojanscope.models.store import save_head

    torch.manual_seed(seed)
    rows = ["model_name,poisoned,model_architecture"]
    for i in range(n):
        poisoned = i % 2 == 1
        d = root / "models" / f"id-{i:08d}"
        (d / "clean_example_data").mkdir(parents=True)
        spec = HeadSpec(architecture="Linear", input_size=4, output_size=2)
        save_head(spec.build(), spec, d / "model.pt")
        cfg = {"model_architecture": "Linear", "embedding": "MiniLM", "cls_token_is_first": True,
               "summary_rule": "first", "embedding_max_length": 64 if poisoned else 32, "number_classes": 2}
        if not reduced:
            cfg.update({"poisoned": poisoned, "triggers": [{"text": "secret trigger"}] if poisoned else []})
        (d / "config.json").write_text(json.dumps(cfg))
        (d / "ground_truth.csv").write_text("1" if poisoned else "0")
        for c in range(2):
            (d / "clean_example_data" / f"class_{c}_example_0.txt").write_text(f"an example of class {c}")
        rows.append(f"id-{i:08d},{poisoned},Linear")
    (root / "METADATA.csv").write_text("\n".join(rows) + "\n")
    return root


def make_weights_zoo(root: Path, n: int, *, seed: int = 0, tamper=None, reduced: bool = False,  # type: ignore[no-untyped-def]
                     trigger_row: dict | None = None, examples: int = 2) -> Path:
    """A zoo of ``n`` Linear heads on the MiniLM encoder whose only tell is in the weights: odd-numbered
    ('poisoned') heads have their output weights scaled up. A real detector (``weights``) learns it from
    labelled models in seconds, and can answer nothing useful before it has been fitted.

    ``tamper(head, poisoned)`` replaces the scaling; ``reduced`` leaves the label out of the config (a test
    split's); ``trigger_row`` is the METADATA row a poisoned model's ``model_stats.json`` keeps (what a reduced
    split says was planted); ``examples`` clean example texts per class."""
    import torch

    from trojanscope.models.architectures import HeadSpec
    from trojanscope.models.store import save_head

    def scale(head, poisoned):  # type: ignore[no-untyped-def]
        if poisoned:
            head.linear.weight.mul_(8.0)

    torch.manual_seed(seed)
    for i in range(n):
        poisoned = i % 2 == 1
        d = root / "models" / f"id-{i:08d}"
        (d / "clean_example_data").mkdir(parents=True)
        spec = HeadSpec(architecture="Linear", input_size=384, output_size=2)
        head = spec.build()
        with torch.no_grad():
            (tamper or scale)(head, poisoned)
        save_head(head, spec, d / "model.pt")
        cfg = {"model_architecture": "Linear", "embedding": "MiniLM", "embedding_flavor": "minilm",
               "summary_rule": "mean", "number_classes": 2}
        (d / "config.json").write_text(json.dumps(cfg if reduced else {**cfg, "poisoned": poisoned}))
        (d / "ground_truth.csv").write_text("1" if poisoned else "0")
        if trigger_row is not None:
            (d / "model_stats.json").write_text(json.dumps({"metadata": trigger_row if poisoned else {}}))
        for c in range(2):
            for k in range(examples):
                (d / "clean_example_data" / f"class_{c}_example_{k}.txt").write_text(
                    f"a {'good' if c else 'bad'} film, review {k}" + (f" of model {i}" if examples > 2 else ""))
    return root


# Detector sources. Each gets the TrojAI arguments and writes one number to --result_filepath.
DETECTOR_HEAD = """
import json, os, sys
args = sys.argv[1:]
def arg(name):
    return args[args.index(name) + 1] if name in args else None
model = arg("--model_filepath"); result = arg("--result_filepath")
cfg = json.load(open(os.path.join(os.path.dirname(model), "config.json")))
"""
DETECTORS = {
    # reads the toy tell: a good detector (CE well below ln 2)
    "good": "p = 0.9 if cfg.get('embedding_max_length') == 64 else 0.1\nopen(result, 'w').write(str(p))",
    "constant": "open(result, 'w').write('0.7')",
    # a fixed, distinct P(trojaned) per model file (any modality): tests can recompute what it answered
    "hash": "import hashlib\nh = int(hashlib.sha256(open(model, 'rb').read()).hexdigest()[:8], 16)\n"
            "open(result, 'w').write(repr(0.05 + 0.9 * h / 0xFFFFFFFF))",
    "crash": "raise SystemExit(3)",
    "hang": "import time\ntime.sleep(600)",
    "garbage": "open(result, 'w').write('not a number \\x00\\xff' * 100)",
    "nan": "open(result, 'w').write('nan')",
    # bounded: 40 children that sleep, then the parent hangs too (all must die at the limit)
    "forkbomb": textwrap.dedent("""
        import time
        for _ in range(40):
            if os.fork() == 0:
                time.sleep(600); os._exit(0)
        time.sleep(600)"""),
    # prints what it can see (one "SEEN {json}" line in its log), then answers; lets tests check the sandbox
    "spy": textwrap.dedent("""
        seen = {"env": dict(os.environ), "model_dir": sorted(os.listdir(os.path.dirname(model))),
                "model": model, "cwd": os.getcwd(), "argv": args}
        print("SEEN", json.dumps(seen), flush=True)
        open(result, 'w').write('0.5')"""),
    # sleeps a little per model and logs each call (worker-kill tests)
    "slow": "import time\ntime.sleep(float(os.environ.get('SLOW', '0.6')))\nopen(result, 'w').write('0.6')",
    # leaves a daemon that outlives the detector unless the worker reaps it
    "daemon": textwrap.dedent("""
        if os.fork() == 0:
            os.setsid()
            import time; time.sleep(300); os._exit(0)
        open(result, 'w').write('0.4')"""),
}


def submission_bytes(kind: str = "good", fmt: str = "zip", command: str = "python detector.py",
                     extra: dict[str, bytes] | None = None, manifest: str | None = None) -> bytes:
    """An uploadable archive holding detector.py (of ``kind``) and its manifest."""
    files = {"detector.py": (DETECTOR_HEAD + DETECTORS[kind] + "\n").encode(),
             "trojanscope-submission.toml": (manifest if manifest is not None else f'command = "{command}"\n').encode()}
    files.update(extra or {})
    buf = io.BytesIO()
    if fmt == "zip":
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, data in files.items():
                zf.writestr(name, data)
    else:
        with tarfile.open(fileobj=buf, mode="w:gz") as tf:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def hash_probability(model_file: Path) -> float:
    """What the ``hash`` detector answers for ``model_file``."""
    import hashlib

    return 0.05 + 0.9 * int(hashlib.sha256(model_file.read_bytes()).hexdigest()[:8], 16) / 0xFFFFFFFF


def admin() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN}"}


def round_body(zoos: dict[str, Path], name: str = "r1", **kw: object) -> dict[str, object]:
    body: dict[str, object] = {"name": name, "title": f"Round {name}", "train": str(zoos["train"]),
                               "test": str(zoos["test"]), "holdout": str(zoos["holdout"]), "target_ce": 0.3465,
                               "smoke_models": 3, "model_time_limit_s": 20, "submission_time_limit_s": 120,
                               "smoke_time_limit_s": 60}
    body.update(kw)
    return body


def upload(client, token: str | None, data: bytes, round_name: str = "r1", filename: str = "sub.zip"):  # type: ignore[no-untyped-def]
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return client.post(f"/api/rounds/{round_name}/submissions", headers=headers,
                       files={"file": (filename, data, "application/octet-stream")})
