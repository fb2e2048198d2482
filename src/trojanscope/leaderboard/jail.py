"""The launcher every submitted detector runs under: ``python -m trojanscope.leaderboard.jail [opts] -- cmd...``.

It is the direct child the harness starts (so it needs nothing but the standard library) and it ends
by ``exec``-ing the detector, with one of two engines:

``--engine bwrap`` (the default on the leaderboard: a security boundary)
    The detector runs under bubblewrap in new user, pid, network, ipc, uts, cgroup and mount
    namespaces. Its file system is built from nothing: ``/usr`` (and the ``/bin``, ``/lib`` links),
    the Python runtime and the trojanscope package read-only at their own paths, a synthetic
    ``/etc/passwd``, a fresh ``/proc`` of its own pid namespace, a minimal ``/dev``, a private
    size-limited ``/tmp`` (its ``HOME``), and the paths of TrojAI's contract found in the command
    line: the model's folder, the clean examples, the tokenizer/embedding files and the learned
    parameters read-only; the scratch folder and the result file's folder writable (the learned
    parameters too in ``--configure_mode``). The submission's working copy (the current directory)
    is read-only. No network, no other process, no database, zoo, data folder or other team's file
    exists in that view. When the worker runs as root, the detector runs as the unprivileged
    ``--uid`` (so ``RLIMIT_NPROC`` holds) after the job's paths are handed to it; the source paths
    reach bubblewrap through bind mounts made in a private mount namespace, so the sandbox uid never
    needs to traverse the server's folders. When the pid namespace's first process exits, the
    kernel kills every process left in it: nothing a detector starts (``setsid``, a cleared
    environment, double forks) outlives it, and ``--die-with-parent`` ends it with the worker.

``--engine none`` (only with ``serve --insecure-no-sandbox``: process hygiene, no boundary)
    A new session, a clean environment and the ``setrlimit`` limits, as before bubblewrap.

Both apply CPU, address-space, process-count and file-size limits with ``setrlimit`` before ``exec``.
"""

from __future__ import annotations

import ctypes
import os
import resource
import shutil
import sys

KEEP_ENV = ("PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
            "PYTHONNOUSERSITE", "PYTHONDONTWRITEBYTECODE", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
            "TOKENIZERS_PARALLELISM", "TROJANSCOPE_SANDBOX")
_LIMITS = {"--cpu": resource.RLIMIT_CPU, "--mem": resource.RLIMIT_AS, "--nproc": resource.RLIMIT_NPROC,
           "--fsize": resource.RLIMIT_FSIZE}
ENGINES = ("bwrap", "none")
_REPEATED = ("--env", "--ro")

# TrojAI's command-line contract: which arguments name paths, and how the sandbox shows each.
CONTRACT_READ = ("--examples_dirpath", "--tokenizer_filepath", "--embedding_filepath",
                 "--configure_models_dirpath", "--round_training_dataset_dirpath", "--metaparameters_filepath",
                 "--schema_filepath")
CONTRACT_PARENT_READ = ("--model_filepath",)       # the model's folder: config.json sits beside model.pt
CONTRACT_WRITE = ("--scratch_dirpath",)
CONTRACT_PARENT_WRITE = ("--result_filepath",)
LEARNED = "--learned_parameters_dirpath"            # read-only, writable in --configure_mode
SANDBOX_HOME = "/tmp"
_STAGE_POINTS = ("/mnt", "/media", "/srv", "/opt")  # a private tmpfs is mounted over the first that exists
_CLONE_NEWNS, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x00020000, 4096, 16384, 1 << 18


def usage() -> str:
    return ("jail: usage: python -m trojanscope.leaderboard.jail [--engine bwrap|none] [--cpu S] [--mem B] "
            "[--nproc N] [--fsize B] [--tmp-bytes B] [--uid U] [--command-words N] [--ro PATH ...] [--env K=V ...] "
            "-- command ...")


def parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """Options (``--name value`` pairs before ``--``) and the command after it.

    Repeated ``--env K=V`` become ``env:K`` keys and repeated ``--ro PATH`` become ``ro:N`` keys."""
    if "--" not in argv:
        raise SystemExit(usage())
    split = argv.index("--")
    opts, command = argv[:split], argv[split + 1:]
    if len(opts) % 2 or not command:
        raise SystemExit("jail: options come in pairs and a command must follow --")
    pairs = list(zip(opts[::2], opts[1::2], strict=True))
    out = {k: v for k, v in pairs if k not in _REPEATED}
    out |= {f"env:{v.split('=', 1)[0]}": v.split("=", 1)[1] for k, v in pairs if k == "--env" and "=" in v}
    out |= {f"ro:{i}": v for i, (k, v) in enumerate(pairs) if k == "--ro"}
    if out.get("--engine", "none") not in ENGINES:
        raise SystemExit(f"jail: --engine must be one of {', '.join(ENGINES)}")
    return out, command


def contract_paths(command: list[str], cwd: str, trusted_from: int) -> tuple[list[str], list[str]]:
    """(read-only, writable) absolute paths the detector's command line names under TrojAI's contract, plus its
    working directory (read-only). Paths that do not exist are left out (the harness makes them all first).

    Only the words from ``trusted_from`` on are read: those the harness and the worker appended. The words
    before them are the submission's own command line, and a team that wrote ``--examples_dirpath /srv/zoos``
    into its manifest must not get that folder shown to its detector."""
    words = command[trusted_from:]

    def value(flag: str) -> str | None:
        return words[words.index(flag) + 1] if flag in words[:-1] else None

    read, write = [cwd], []
    for flags, parent, into in ((CONTRACT_READ, False, read), (CONTRACT_PARENT_READ, True, read),
                                (CONTRACT_WRITE, False, write), (CONTRACT_PARENT_WRITE, True, write)):
        for flag in flags:
            if (v := value(flag)) is not None:
                path = os.path.abspath(os.path.join(cwd, v))
                into.append(os.path.dirname(path) if parent else path)
    if (v := value(LEARNED)) is not None:
        (write if "--configure_mode" in words else read).append(os.path.abspath(os.path.join(cwd, v)))
    return [p for p in read if os.path.exists(p)], [p for p in write if os.path.exists(p)]


def _apply_limits(opts: dict[str, str]) -> None:
    for flag, which in _LIMITS.items():
        if flag in opts:
            value = int(float(opts[flag]))
            _soft, hard = resource.getrlimit(which)
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            # RLIMIT_CPU: SIGXCPU at the soft limit, SIGKILL one second later at the hard one.
            resource.setrlimit(which, (value, value + 1 if which == resource.RLIMIT_CPU else value))


def _libc_call(name: str, *args: object) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def _chown_tree(path: str, uid: int, gid: int) -> None:
    """Hand a job's own files to the sandbox uid (the read-only ones are then readable, the rest writable)."""
    os.chown(path, uid, gid, follow_symlinks=False)
    if os.path.isdir(path) and not os.path.islink(path):
        for root, dirs, files in os.walk(path):
            for name in dirs + files:
                os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)


def _stage(sources: list[str]) -> dict[str, str]:
    """Root only: in a private mount namespace, bind every source under a fresh tmpfs the sandbox uid can
    traverse, so bubblewrap (which resolves sources as that uid) never needs a path into the server's folders.
    Returns {source: staged path}."""
    _libc_call("unshare", _CLONE_NEWNS)
    _libc_call("mount", b"none", b"/", None, _MS_REC | _MS_PRIVATE, None)
    # Opened in this namespace (a bind from a descriptor of another namespace is refused), before the
    # tmpfs below can hide any of them.
    fds = {src: os.open(src, os.O_PATH | os.O_CLOEXEC) for src in sources}
    point = next((p for p in _STAGE_POINTS if os.path.isdir(p) and not os.path.islink(p)), None)
    if point is None:
        raise OSError(f"no mount point for the sandbox's staging area (tried {', '.join(_STAGE_POINTS)})")
    _libc_call("mount", b"tmpfs", point.encode(), b"tmpfs", 0, b"mode=0755,size=64k")
    staged = {}
    for i, (src, fd) in enumerate(fds.items()):
        target = os.path.join(point, str(i))
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.mkdir(target)
        else:
            open(target, "w").close()  # noqa: SIM115 - an empty file to bind a file onto
        _libc_call("mount", f"/proc/self/fd/{fd}".encode(), target.encode(), None, _MS_BIND | _MS_REC, None)
        os.close(fd)
        staged[src] = target
    return staged


def _data_fd(text: str) -> str:
    """A pipe holding ``text``, inherited by bwrap, for ``--ro-bind-data`` (nothing is written to disk)."""
    read, write = os.pipe()
    os.write(write, text.encode())
    os.close(write)
    os.set_inheritable(read, True)
    return str(read)


def system_binds() -> list[str]:
    """/usr read-only, the merged-/usr links (or folders) beside it, and the few /etc files programs read."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    for name in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
                 "/etc/localtime", "/sys/devices/system/cpu"):
        args += ["--ro-bind-try", name, name]
    return args


def bwrap_argv(command: list[str], env: dict[str, str], opts: dict[str, str], *, cwd: str) -> list[str]:
    """The whole bubblewrap command line; as root, also stages the sources and drops to ``--uid``."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise OSError("bubblewrap (bwrap) is not installed")
    if "--command-words" not in opts:
        raise OSError("the bwrap engine needs --command-words N: how many words of the command are the submission's")
    read, write = contract_paths(command, cwd, int(opts["--command-words"]))
    runtime = [os.path.abspath(v) for k, v in opts.items() if k.startswith("ro:") and os.path.exists(v)]
    root = os.geteuid() == 0
    uid = int(opts.get("--uid", 0)) if root else os.getuid()
    if root and uid <= 0:
        raise OSError("as root, the jail needs --uid: the unprivileged uid the detector runs as")
    gid = uid if root else os.getgid()
    # Each shown path at the path the command names, from its real path on the host.
    binds = {p: ("--ro-bind", os.path.realpath(p)) for p in runtime + read}
    binds |= {p: ("--bind", os.path.realpath(p)) for p in write}
    if root:
        for path in dict.fromkeys(os.path.realpath(p) for p in read + write):
            _chown_tree(path, uid, gid)
        staged = _stage(list(dict.fromkeys(src for _, src in binds.values())))
    else:
        staged = {src: src for _, src in binds.values()}
    args = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
            "--hostname", "sandbox", "--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    args += system_binds()
    args += ["--ro-bind-data", _data_fd(f"detector:x:{uid}:{gid}:detector:{SANDBOX_HOME}:/usr/sbin/nologin\n"),
             "/etc/passwd", "--ro-bind-data", _data_fd(f"detector:x:{gid}:\n"), "/etc/group",
             "--ro-bind-data", _data_fd("127.0.0.1 localhost\n::1 localhost\n"), "/etc/hosts",
             "--proc", "/proc", "--dev", "/dev"]
    tmp_bytes = str(int(float(opts.get("--tmp-bytes", 512 * 1024 * 1024))))
    args += ["--size", tmp_bytes, "--tmpfs", SANDBOX_HOME, "--size", tmp_bytes, "--tmpfs", "/dev/shm"]
    # A parent before its children, so a read-only model folder inside a writable copy stays read-only.
    for dest, (kind, src) in sorted(binds.items(), key=lambda item: (item[0].count("/"), item[0])):
        args += [kind, staged[src], dest]
    # The skeleton folders bubblewrap made for those paths live in its root tmpfs, which has no size limit:
    # read-only, so the only writable places are the sized /tmp and /dev/shm and the contract's folders.
    args += ["--remount-ro", "/", "--chdir", cwd, "--", *command]
    if root:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    return args


def main(argv: list[str] | None = None) -> None:
    opts, command = parse(list(sys.argv[1:] if argv is None else argv))
    if os.getsid(0) != os.getpid():
        os.setsid()
    env = {k[4:]: v for k, v in opts.items() if k.startswith("env:")}
    env = {k: v for k, v in env.items() if k in KEEP_ENV}
    engine = opts.get("--engine", "none")
    try:
        if engine == "bwrap":
            env |= {"HOME": SANDBOX_HOME, "TMPDIR": SANDBOX_HOME}
            command = bwrap_argv(command, env, opts, cwd=os.getcwd())
    except OSError as exc:
        print(f"jail: cannot build the sandbox: {exc}", file=sys.stderr)
        raise SystemExit(126) from None
    _apply_limits(opts)
    os.umask(0o077)
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"jail: cannot run {command[0]!r}: {exc.strerror}", file=sys.stderr)
        raise SystemExit(127) from None


if __name__ == "__main__":
    main()
