"""Per-model cost of the leaderboard's bubblewrap sandbox, and proof that it changes no answer.

Builds a zoo of N Round-5-size heads (GRU 384→256, bidirectional, 2 layers, ~6 MB; 20 clean examples per class)
and scores it twice through the scoring harness exactly as a leaderboard worker does (the jail launcher's
argv, one harness call over the zoo, the job's limits), with a detector that reads the model file and answers
a probability derived from its bytes (a no-op apart from that, so the difference is the sandbox's cost):

* ``--engine none``: the jail without isolation (new session, clean environment, setrlimit);
* ``--engine bwrap``: the same under bubblewrap (namespaces, the unprivileged per-job uid when run as root,
  staging of the contract's paths, the private /tmp).

Prints seconds per model for each, the sandbox's overhead per model (goal, issue 45: <= 0.5 s), and whether the
answers are identical. Needs bubblewrap (``apt-get install bubblewrap``).

    .venv/bin/python benchmarks/sandbox_overhead.py --models 20
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness_overhead import build_zoo  # noqa: E402 - the same realistic heads as the harness benchmark

DETECTOR = """import hashlib, sys
args = sys.argv[1:]
model = args[args.index("--model_filepath") + 1]
result = args[args.index("--result_filepath") + 1]
digest = hashlib.sha256(open(model, "rb").read()).hexdigest()
open(result, "w").write(repr(0.05 + 0.9 * int(digest[:8], 16) / 0xFFFFFFFF))
"""


def run(engine: str, zoo: Path, work: Path, out: Path) -> tuple[float, dict[str, float]]:
    from trojanscope.leaderboard import sandbox
    from trojanscope.leaderboard.settings import Settings
    from trojanscope.scoring.harness import evaluate

    st = Settings()
    env = sandbox.sandbox_env(work, f"bench-{engine}")
    argv = sandbox.jailed_command("python detector.py", env, cpu_seconds=65, memory_bytes=st.memory_bytes,
                                  max_processes=st.max_processes, file_size_bytes=st.file_size_bytes, engine=engine,
                                  tmp_bytes=st.sandbox_tmp_bytes,
                                  uid=sandbox.sandbox_uid(st.sandbox_uid_base, 1) if os.geteuid() == 0 else None)
    with sandbox.private_tmp(out / "tmp"):
        t0 = time.perf_counter()
        result = evaluate(zoo, out / "run", command=argv, time_limit_s=60, env=env, cwd=work, progress=False)
        wall = time.perf_counter() - t0
    frame = result.results
    bad = frame[frame["status"] != "ok"]
    if len(bad):
        raise SystemExit(f"{engine}: {len(bad)} models failed, e.g. {bad.iloc[0]['reason']}")
    return wall, dict(zip(frame["model_name"], frame["probability"], strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=int, default=20, help="zoo size (default 20)")
    args = parser.parse_args()
    if args.models < 1:
        parser.error("--models must be at least 1")

    from trojanscope.leaderboard.sandbox import isolation_problem

    if (problem := isolation_problem()) is not None:
        parser.error(f"cannot measure the sandbox here: {problem}")
    tmp = Path(tempfile.mkdtemp(prefix="sandbox-bench-"))
    zoo = build_zoo(tmp / "zoo", args.models)
    figures = {}
    answers = {}
    for engine in ("none", "bwrap", "none", "bwrap"):  # interleaved, twice: a warm page cache for both
        work = tmp / f"work-{engine}-{len(figures)}"
        work.mkdir()
        (work / "detector.py").write_text(DETECTOR)
        wall, answers[engine] = run(engine, zoo, work, tmp / f"out-{engine}-{len(figures)}")
        figures.setdefault(engine, []).append(wall / args.models)
    none_s, bwrap_s = min(figures["none"]), min(figures["bwrap"])
    print(f"models: {args.models} (model.pt {(zoo / 'models' / 'id-00000000' / 'model.pt').stat().st_size / 2**20:.1f} "
          f"MB, 40 clean examples each); worker uid {'root -> per-job uid' if os.geteuid() == 0 else os.geteuid()}")
    print(f"unconfined jail:  {none_s:.3f} s/model (runs: {', '.join(f'{x:.3f}' for x in figures['none'])})")
    print(f"bubblewrap jail:  {bwrap_s:.3f} s/model (runs: {', '.join(f'{x:.3f}' for x in figures['bwrap'])})")
    overhead = bwrap_s - none_s
    print(f"sandbox overhead: {overhead:.3f} s/model (goal <= 0.5 s: {'met' if overhead <= 0.5 else 'MISSED'})")
    same = answers["none"] == answers["bwrap"]
    print(f"answers identical inside and outside the sandbox: {same} ({len(answers['bwrap'])} models)")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
