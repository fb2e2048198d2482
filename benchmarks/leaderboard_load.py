"""Load test of the leaderboard service on loopback: page latency under concurrent readers, upload throughput.

    .venv/bin/python benchmarks/leaderboard_load.py [--db sqlite|postgresql] [--workers 2] [--readers 100]
        [--requests-per-reader 50] [--teams 50] [--scored-per-team 10] [--upload-seconds 30] [--uploaders 8]
        [--json out.json]

It builds two tiny zoos with trojanscope's own model store, starts ``trojanscope serve`` (SQLite, or a
throwaway PostgreSQL server with ``--db postgresql``; ``--workers`` scoring workers) on 127.0.0.1, fills
the round with synthetic scored submissions (rows written straight into the database, labelled
``synthetic`` in their command, so the page has a realistic number of rows to rank), then keeps every
worker busy scoring a real slow submission of its own while

1. ``--readers`` concurrent clients each fetch the round's leaderboard page ``--requests-per-reader``
   times; it reports p50/p95/p99/max latency and how many jobs were still running at the end;
2. ``--uploaders`` concurrent clients upload small valid submissions for ``--upload-seconds``; it
   reports accepted uploads per minute and checks that every accepted upload is in the database
   with its queued smoke job (no loss).

Everything is bounded in time and count and talks to 127.0.0.1 only. Client and server share the
machine, so the numbers are a floor for what a dedicated server does.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import httpx

ADMIN = "benchmark-organiser-token"
SLOW_DETECTOR = """import sys, time
a = sys.argv
time.sleep(1.0)
open(a[a.index('--result_filepath') + 1], 'w').write('0.5')
"""


def make_zoo(root: Path, n: int, seed: int) -> Path:
    import torch

    from trojanscope.models.architectures import HeadSpec
    from trojanscope.models.store import save_head

    torch.manual_seed(seed)  # one seed per split: a round whose splits share a model is refused
    for i in range(n):
        d = root / "models" / f"id-{i:08d}"
        (d / "clean_example_data").mkdir(parents=True)
        spec = HeadSpec(architecture="Linear", input_size=4, output_size=2)
        save_head(spec.build(), spec, d / "model.pt")
        (d / "config.json").write_text(json.dumps({"model_architecture": "Linear", "number_classes": 2}))
        (d / "ground_truth.csv").write_text(str(i % 2))
        (d / "clean_example_data" / "class_0_example_0.txt").write_text("an example")
    (root / "METADATA.csv").write_text("model_name,poisoned\n" + "".join(f"id-{i:08d},{i % 2 == 1}\n"
                                                                         for i in range(n)))
    return root


def archive(detector: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("detector.py", detector)
        zf.writestr("trojanscope-submission.toml", 'command = "python detector.py"\n')
    return buf.getvalue()


def seed_scored(db_url: str, teams: int, per_team: int) -> None:
    """Synthetic scored submissions so the leaderboard ranks ``teams`` teams over ``teams*per_team`` rows."""
    import random

    from trojanscope.leaderboard.db import Job, Round, Submission, Team, make_sessionmaker

    rng = random.Random(0)
    with make_sessionmaker(db_url)() as s:
        rnd = s.query(Round).filter_by(name="bench").one()
        for t in range(teams):
            team = Team(name=f"synthetic-{t:03d}", token_hash="!")  # no valid token: cannot upload
            s.add(team)
            s.flush()
            for _ in range(per_team):
                sub = Submission(round_id=rnd.id, team_id=team.id, filename="synthetic.zip", size_bytes=0,
                                 sha256="0" * 64, command="synthetic", status="scored")
                s.add(sub)
                s.flush()
                ce = rng.uniform(0.2, 0.8)
                s.add(Job(submission_id=sub.id, stage="test", status="done", runtime_s=rng.uniform(10, 100),
                          scores={"cross_entropy": ce, "cross_entropy_ci95": 0.05, "roc_auc": 1 - ce / 2,
                                  "brier": ce / 3, "n": 20, "n_ok": 20, "n_models": 20}))
        s.commit()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_up(base: str, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            last = (log.read_text().strip().splitlines() or ["(no output)"])[-1]
            raise SystemExit(f"server exited with {proc.returncode}: {last}")
        try:
            if httpx.get(base + "/api/rounds", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit("server did not come up")


async def readers(base: str, n_readers: int, per_reader: int, time_cap: float) -> tuple[list[float], int]:
    """``n_readers`` keep-alive connections, each fetching the round page ``per_reader`` times in turn.

    A minimal HTTP/1.1 client on asyncio streams: httpx's pool costs more CPU per request than the
    server does at this concurrency, and client and server share the CPUs, so it would measure itself.
    """
    host, port = base.removeprefix("http://").split(":")
    latencies: list[float] = []
    errors = 0
    deadline = time.monotonic() + time_cap
    request = f"GET /rounds/bench HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()

    async def one_reader() -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            for _ in range(per_reader):
                if time.monotonic() > deadline:
                    return
                t0 = time.perf_counter()
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                body = await reader.readexactly(length)
                latencies.append(time.perf_counter() - t0)
                errors += not head.startswith(b"HTTP/1.1 200") or b"leaderboard" not in body
        finally:
            writer.close()

    await asyncio.gather(*(one_reader() for _ in range(n_readers)))
    return latencies, errors


async def uploaders(base: str, tokens: list[str], n: int, seconds: float, max_uploads: int) -> dict[str, object]:
    body = archive("import sys\na = sys.argv\nopen(a[a.index('--result_filepath') + 1], 'w').write('0.5')\n")
    accepted: list[int] = []
    codes: dict[int, int] = {}
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        async def one(k: int) -> None:
            i = 0
            while time.monotonic() < deadline and len(accepted) < max_uploads:
                token = tokens[(k + i * n) % len(tokens)]
                i += 1
                r = await client.post("/api/rounds/bench/submissions", headers={"Authorization": f"Bearer {token}"},
                                      files={"file": ("s.zip", body, "application/zip")})
                codes[r.status_code] = codes.get(r.status_code, 0) + 1
                if r.status_code == 201:
                    accepted.append(r.json()["id"])
        t0 = time.monotonic()
        await asyncio.gather(*(one(k) for k in range(n)))
        elapsed = time.monotonic() - t0
    return {"accepted_ids": accepted, "codes": codes, "elapsed_s": elapsed}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--readers", type=int, default=100)
    ap.add_argument("--requests-per-reader", type=int, default=50)
    ap.add_argument("--sequential", type=int, default=200, help="requests of the single-reader baseline")
    ap.add_argument("--teams", type=int, default=50)
    ap.add_argument("--scored-per-team", type=int, default=10)
    ap.add_argument("--upload-seconds", type=float, default=30.0)
    ap.add_argument("--uploaders", type=int, default=8)
    ap.add_argument("--max-uploads", type=int, default=2000)
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--workers", type=int, default=2, help="scoring workers of the server, each kept busy by a "
                    "slow submission of its own while the readers run")
    ap.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite",
                    help="postgresql: a throwaway local server (Debian's postgresql + the postgres extra)")
    args = ap.parse_args()
    if not (1 <= args.workers <= 4 and 1 <= args.readers <= 1000 and 1 <= args.requests_per_reader <= 100
            and args.upload_seconds <= 300):
        raise SystemExit("keep the load bounded: workers 1..4, readers 1..1000, requests-per-reader 1..100, "
                         "upload-seconds <= 300")

    load_at_start = os.getloadavg()[0]  # other work on the machine shares the CPUs with client and server
    tmp = Path(tempfile.mkdtemp(prefix="trojanscope-lb-bench-"))
    train, test = make_zoo(tmp / "train", 4, seed=1), make_zoo(tmp / "test", 120, seed=2)
    (tmp / "rounds.toml").write_text(f'[[round]]\nname = "bench"\ntitle = "Benchmark round"\ntrain = "{train}"\n'
                                     f'test = "{test}"\nsmoke_models = 2\nmodel_time_limit_s = 30\n')
    pg = None
    if args.db == "postgresql":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.leaderboard.postgres import PostgresServer

        pg = PostgresServer()
        db_url = pg.new_database()
    else:
        db_url = f"sqlite:///{tmp / 'lb.db'}"
    print(f"database: {args.db}")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "TROJANSCOPE_ADMIN_TOKEN": ADMIN, "TROJANSCOPE_RATE_LIMIT_COUNT": "1000000",
           "TROJANSCOPE_POLL_S": "0.2"}
    proc = subprocess.Popen([sys.executable, "-m", "trojanscope.cli", "serve", "--db", db_url, "--port", str(port),
                             "--rounds", str(tmp / "rounds.toml"), "--workers", str(args.workers),
                             "--data-dir", str(tmp / "data"), "--no-access-log"],
                            env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=(tmp / "serve.log").open("w"))
    try:
        wait_up(base, proc, tmp / "serve.log")
        seed_scored(db_url, args.teams, args.scored_per_team)
        admin = {"Authorization": f"Bearer {ADMIN}"}
        tokens = [httpx.post(base + "/api/teams", json={"name": f"uploader-{i}"}, headers=admin).json()["token"]
                  for i in range(4)]
        slow = [httpx.post(base + "/api/rounds/bench/submissions", headers={"Authorization": f"Bearer {tokens[i]}"},
                           files={"file": ("slow.zip", archive(SLOW_DETECTOR), "application/zip")}).json()["id"]
                for i in range(args.workers)]
        deadline = time.monotonic() + 180
        while sum(j["status"] == "running" and j["stage"] == "test"
                  for j in httpx.get(base + "/api/jobs", headers=admin).json()) < args.workers:
            if time.monotonic() > deadline:
                raise SystemExit(f"the {args.workers} slow submissions never reached their test stage together")
            time.sleep(0.3)

        # one reader first: the server's own time per page, without queueing behind other readers
        solo, solo_errors = asyncio.run(readers(base, 1, args.sequential, 60))
        latencies, errors = asyncio.run(readers(base, args.readers, args.requests_per_reader, 120))
        jobs = httpx.get(base + "/api/jobs", headers=admin).json()
        running_during_reads = sum(j["status"] == "running" for j in jobs)
        reads = {"requests": len(latencies), "errors": errors, "p50_ms": 1000 * pct(latencies, 50),
                 "p95_ms": 1000 * pct(latencies, 95), "p99_ms": 1000 * pct(latencies, 99),
                 "max_ms": 1000 * max(latencies), "mean_ms": 1000 * statistics.fmean(latencies),
                 "throughput_per_s": len(latencies) / max(1e-9, sum(latencies) / args.readers),
                 "single_reader": {"requests": len(solo), "errors": solo_errors, "p50_ms": 1000 * pct(solo, 50),
                                   "p95_ms": 1000 * pct(solo, 95)},
                 "job_running_during_reads": running_during_reads, "leaderboard_rows": args.teams}

        up = asyncio.run(uploaders(base, tokens, args.uploaders, args.upload_seconds, args.max_uploads))
        from sqlalchemy import select

        from trojanscope.leaderboard.db import Job, Submission, make_sessionmaker
        ids = set(up["accepted_ids"])  # type: ignore[arg-type]
        with make_sessionmaker(db_url)() as s:
            stored = set(s.scalars(select(Submission.id).where(Submission.id.in_(ids))))
            with_job = set(s.scalars(select(Job.submission_id).where(Job.submission_id.in_(ids),
                                                                     Job.stage == "smoke")))
        uploads = {"accepted": len(ids), "codes": up["codes"], "seconds": round(up["elapsed_s"], 2),
                   "accepted_per_minute": 60 * len(ids) / up["elapsed_s"], "lost": len(ids - stored),
                   "without_smoke_job": len(ids - with_job), "concurrency": args.uploaders}
        result = {"reads": reads, "uploads": uploads, "slow_submissions": slow, "workers": args.workers,
                  "cpus": os.cpu_count(), "loadavg_1min": os.getloadavg()[0], "loadavg_1min_at_start": load_at_start}
    finally:
        try:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # the server exited on its own (wait_up said why)
            pass
        if pg is not None:
            pg.stop()
    result["database"] = args.db
    print(json.dumps(result, indent=2))
    print(f"leaderboard page under {args.readers} concurrent readers ({args.workers} workers scoring, "
          f"{reads['job_running_during_reads']} jobs still running at the end): "
          f"p50 {reads['p50_ms']:.0f} ms, p95 {reads['p95_ms']:.0f} ms, max {reads['max_ms']:.0f} ms, "
          f"{errors} errors; one reader alone: p50 {reads['single_reader']['p50_ms']:.1f} ms, "
          f"p95 {reads['single_reader']['p95_ms']:.1f} ms; load average {result['loadavg_1min']:.1f} on "
          f"{result['cpus']} CPUs")
    print(f"uploads: {uploads['accepted']} accepted in {uploads['seconds']} s = {uploads['accepted_per_minute']:.0f}"
          f"/min with {args.uploaders} concurrent clients, lost {uploads['lost']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
