"""Executors: results stream back, and killing the parent never leaves worker processes behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from trojanscope.errors import RegistryError
from trojanscope.rounds.executor import SerialExecutor, make_executor


def _square(x: int) -> int:
    return x * x


def test_serial_executor_runs_in_order() -> None:
    assert list(SerialExecutor().run(_square, [1, 2, 3])) == [1, 4, 9]


def test_unknown_executor_lists_choices() -> None:
    with pytest.raises(RegistryError, match="available: local, ray, serial"):
        make_executor("slurm", 2)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_workers_die_with_a_killed_parent(tmp_path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(f"""
        import os, time
        from trojanscope.rounds.executor import ProcessExecutor
        def nap(_):
            open({str(tmp_path)!r} + "/worker.pid", "w").write(str(os.getpid()))
            time.sleep(120)
        if __name__ == "__main__":
            for _ in ProcessExecutor(1).run(nap, [0]):
                pass
    """))
    parent = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path)
    pid_file = tmp_path / "worker.pid"
    deadline = time.time() + 120
    while time.time() < deadline and not pid_file.exists():
        time.sleep(0.1)
    assert pid_file.exists(), "worker never started"
    worker = int(pid_file.read_text())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    for _ in range(50):
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(worker, signal.SIGKILL)
    pytest.fail("the worker outlived its killed parent")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and signals as on Linux")
def test_ctrl_c_stops_the_pool_without_running_the_queued_items(tmp_path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys, time
        from trojanscope.rounds.executor import ProcessExecutor
        def nap(i):
            open({str(tmp_path)!r} + f"/started-{{i}}", "w").close()
            time.sleep(300)
        if __name__ == "__main__":
            try:
                for _ in ProcessExecutor(2).run(nap, range(6)):
                    pass
            except KeyboardInterrupt:
                sys.exit(130)
    """))
    parent = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, start_new_session=True,
                              stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and len(list(tmp_path.glob("started-*"))) < 2:
        time.sleep(0.1)
    try:
        os.killpg(parent.pid, signal.SIGINT)  # Ctrl-C: the whole foreground process group
        # Before the fix the workers went on through the queue, five minutes a nap; 90 s leaves room for a loaded
        # machine to tear the pool down (a 20 s limit timed out under a full suite) and still catches that.
        _, err = parent.communicate(timeout=90)
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
    assert parent.returncode == 130 and "Traceback" not in err, err
    assert len(list(tmp_path.glob("started-*"))) == 2  # nothing queued was started after the interrupt


def test_ray_tasks_ask_for_a_share_of_a_gpu_only_where_heads_train_on_one(monkeypatch):
    from trojanscope.errors import ConfigError
    from trojanscope.rounds.executor import ray_task_options

    monkeypatch.delenv("TROJANSCOPE_RAY_TASKS_PER_GPU", raising=False)
    monkeypatch.setenv("TROJANSCOPE_TRAIN_DEVICE", "cpu")
    assert ray_task_options(3) == {"max_retries": 3}  # Ray would hide the GPU from it: fine, it trains on the CPU
    monkeypatch.setenv("TROJANSCOPE_TRAIN_DEVICE", "cuda:0")
    assert ray_task_options(3) == {"max_retries": 3, "num_gpus": 1 / 15}
    monkeypatch.setenv("TROJANSCOPE_RAY_TASKS_PER_GPU", "4")
    assert ray_task_options(3)["num_gpus"] == 0.25
    monkeypatch.setenv("TROJANSCOPE_RAY_TASKS_PER_GPU", "0")
    with pytest.raises(ConfigError, match="TROJANSCOPE_RAY_TASKS_PER_GPU"):
        ray_task_options(3)
