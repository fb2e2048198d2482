"""The launcher every submitted detector runs under: ``python -m trojanscope.leaderboard.jail [opts] -- cmd...``.

Before ``exec`` of the detector it: starts a new session (so the whole process group can be
killed), marks the process with ``TROJANSCOPE_SANDBOX=<tag>`` (inherited by every child, which
is how the worker finds and kills leftovers), replaces the environment with a small clean one,
and applies CPU, address-space, process-count and file-size limits with ``setrlimit``. It is the
direct child the harness starts, so it needs nothing but the standard library.
"""

from __future__ import annotations

import os
import resource
import sys

KEEP_ENV = ("PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
            "PYTHONNOUSERSITE", "PYTHONDONTWRITEBYTECODE", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
            "TOKENIZERS_PARALLELISM", "TROJANSCOPE_SANDBOX")
_LIMITS = {"--cpu": resource.RLIMIT_CPU, "--mem": resource.RLIMIT_AS, "--nproc": resource.RLIMIT_NPROC,
           "--fsize": resource.RLIMIT_FSIZE}


def parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """Options (``--name value`` pairs before ``--``) and the command after it."""
    if "--" not in argv:
        raise SystemExit("jail: usage: python -m trojanscope.leaderboard.jail [--cpu S] [--mem B] [--nproc N] "
                         "[--fsize B] [--env K=V ...] -- command ...")
    split = argv.index("--")
    opts, command = argv[:split], argv[split + 1:]
    if len(opts) % 2 or not command:
        raise SystemExit("jail: options come in pairs and a command must follow --")
    return {opts[i]: opts[i + 1] for i in range(0, len(opts), 2)} | {
        f"env:{v.split('=', 1)[0]}": v.split("=", 1)[1] for k, v in zip(opts[::2], opts[1::2], strict=True)
        if k == "--env" and "=" in v}, command


def main(argv: list[str] | None = None) -> None:
    opts, command = parse(list(sys.argv[1:] if argv is None else argv))
    if os.getsid(0) != os.getpid():
        os.setsid()
    env = {k[4:]: v for k, v in opts.items() if k.startswith("env:")}
    env = {k: v for k, v in env.items() if k in KEEP_ENV}
    for flag, which in _LIMITS.items():
        if flag in opts:
            value = int(float(opts[flag]))
            _soft, hard = resource.getrlimit(which)
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            # RLIMIT_CPU: SIGXCPU at the soft limit, SIGKILL one second later at the hard one.
            resource.setrlimit(which, (value, value + 1 if which == resource.RLIMIT_CPU else value))
    os.umask(0o077)
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"jail: cannot run {command[0]!r}: {exc.strerror}", file=sys.stderr)
        raise SystemExit(127) from None


if __name__ == "__main__":
    main()
