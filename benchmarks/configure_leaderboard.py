"""Configure mode end to end on the leaderboard, against the same detector fitted beforehand.

Runs a throwaway leaderboard (SQLite, one in-process worker, the real sandbox) on the given train and test
zoos. The submission is ``trojanscope detect --detector NAME`` with ``configure = true`` and no parameter file:
its configure step refits it on the round's train split, then smoke and test run with what it wrote. The
comparison is ``detect fit`` on the same train zoo, scored on the test zoo by the harness with ``--params``.
Prints test CE (95% CI) and ROC-AUC for both, and each leaderboard stage's time. (The submission runs the
trojanscope this script imports, whatever is installed in the interpreter.)

    .venv/bin/python benchmarks/configure_leaderboard.py --train zoo/r5-train --test zoo/r5-test --detector default
"""

from __future__ import annotations

import argparse
import io
import tarfile
import tempfile
import time
from pathlib import Path


def submission_archive(path: Path, detector: str) -> Path:
    """A submission that is only ``trojanscope detect --detector NAME`` (configure = true)."""
    import trojanscope

    src = str(Path(trojanscope.__file__).resolve().parents[1])
    files = {
        "detector.py": (f"import sys\nsys.path.insert(0, {src!r})\nfrom trojanscope.cli import main\n"
                        f"main(['detect', '--detector', {detector!r}, *sys.argv[1:]])\n").encode(),
        "trojanscope-submission.toml": b'command = "python detector.py"\nconfigure = true\n',
    }
    with tarfile.open(path, "w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", type=Path, required=True, help="Train zoo (labelled): the configure step's models.")
    parser.add_argument("--test", type=Path, required=True, help="Test zoo (labelled) the stages are scored on.")
    parser.add_argument("--detector", default="default", help="Registered learned detector.")
    parser.add_argument("--model-time-limit", type=float, default=600.0, help="Seconds per model.")
    parser.add_argument("--configure-time-limit", type=float, default=3600.0, help="Seconds for configure.")
    parser.add_argument("--workdir", type=Path, default=None, help="Where the leaderboard lives (default: a temp dir).")
    args = parser.parse_args()

    from trojanscope.detectors.runner import fit_on_zoo
    from trojanscope.leaderboard import services
    from trojanscope.leaderboard.db import Job, make_sessionmaker
    from trojanscope.leaderboard.settings import Settings
    from trojanscope.leaderboard.worker import Worker
    from trojanscope.scoring.harness import evaluate

    work = args.workdir or Path(tempfile.mkdtemp(prefix="configure-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    settings = Settings(db_url=f"sqlite:///{work / 'lb.db'}", data_dir=work / "data", admin_token="bench",
                        configure_time_limit_s=args.configure_time_limit)
    maker = make_sessionmaker(settings.db_url)
    with maker() as s:
        rnd = services.create_round(s, services.RoundIn(
            name="bench", train=args.train, test=args.test, smoke_models=2, model_time_limit_s=args.model_time_limit,
            submission_time_limit_s=30 * 86400, smoke_time_limit_s=7 * 86400))
        team, _ = services.create_team(s, "bench")
        sub = services.create_submission(s, settings, rnd, team, submission_archive(work / "sub.tar.gz", args.detector),
                                         "sub.tar.gz")
        sub_id = sub.id
    t0 = time.perf_counter()
    Worker(settings, session_factory=maker).run_until_idle()
    leaderboard_s = time.perf_counter() - t0
    with maker() as s:
        jobs = {j.stage: j for j in s.query(Job).filter(Job.submission_id == sub_id)}
        status, message = services.get_submission(s, sub_id).status, services.get_submission(s, sub_id).message

    t0 = time.perf_counter()
    fit_on_zoo(args.train, args.detector, work / "prefit.json")
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    pre = evaluate(args.test, work / "prefit-test", detector=args.detector, params=work / "prefit.json",
                   time_limit_s=args.model_time_limit, progress=False)
    pre_s = time.perf_counter() - t0

    def row(name: str, sc: dict, seconds: float) -> str:
        ce, ci, auc = sc.get("cross_entropy"), sc.get("cross_entropy_ci95"), sc.get("roc_auc")
        fmt = (lambda v: "-" if v is None else f"{v:.4f}")  # noqa: E731
        return f"{name:<34} {fmt(ce):>8} ± {fmt(ci):<8} {fmt(auc):>8} {seconds:>9.1f}"

    print(f"detector {args.detector}; train {args.train}; test {args.test}; submission status {status}"
          + (f" ({message})" if message else ""))
    print(f"{'':<34} {'test CE':>8}   {'95% CI':<8} {'ROC-AUC':>8} {'seconds':>9}")
    for stage in ("configure", "smoke", "test"):
        job = jobs.get(stage)
        if job is not None:
            print(row(f"leaderboard {stage} ({job.status})", job.scores or {}, job.runtime_s or 0.0))
    print(row("pre-fitted (detect fit + evaluate)", pre.scores, fit_s + pre_s))
    print(f"leaderboard wall time {leaderboard_s:.1f} s; detect fit {fit_s:.1f} s; evaluate {pre_s:.1f} s")


if __name__ == "__main__":
    main()
