"""``trojanscope serve`` (the leaderboard web server plus its worker processes, in one command) and
``trojanscope rounds download`` (a team's copy of a round's train split)."""

from __future__ import annotations

from pathlib import Path

import typer


def download(
    round_name: str = typer.Argument(..., metavar="ROUND", help="The round's name on the server."),
    out: Path = typer.Option(..., "--out", help="Folder to unpack the train split into (must not exist or be "
                             "empty); the partial archive is kept beside it as .OUT.tar.part."),
    server: str = typer.Option(..., "--server", help="The leaderboard's base URL, e.g. https://lb.example.org."),
    token: str = typer.Option(..., "--token", envvar="TROJANSCOPE_TEAM_TOKEN", help="Your team token "
                              "(or set TROJANSCOPE_TEAM_TOKEN, which keeps it out of the process list)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
) -> None:
    """Download a round's train split (models with their full configs, ground truth and METADATA), as TrojAI
    published its training data: streamed, with a progress bar, resumed where an interrupted run stopped,
    checked against the server's sha256, then unpacked into --out. The test and holdout splits never leave
    the server. Example:

      TROJANSCOPE_TEAM_TOKEN=... trojanscope rounds download r1 --out zoo/r1-train --server http://127.0.0.1:8000
    """
    from trojanscope.leaderboard.client import download_train_split

    info = download_train_split(server, round_name, out, token, progress=not quiet)
    resumed = f", resumed at byte {info['resumed_from']}" if info["resumed_from"] else ""
    typer.echo(f"{round_name} train split: {info['n_files']} files, {info['size_bytes']} bytes "
               f"(sha256 {info['sha256'][:16]}... verified{resumed}); unpacked into {out}")


def serve(
    db: str = typer.Option("sqlite:///leaderboard.db", "--db", help="Database URL: sqlite:///FILE (default, "
                           "embedded) or postgresql+psycopg://user@host/db. Created and upgraded on start."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on; keep 127.0.0.1 unless a reverse proxy "
                             "with TLS sits in front."),
    port: int = typer.Option(8000, min=1, max=65535, help="TCP port."),
    rounds: Path | None = typer.Option(None, "--rounds", help="rounds.toml, one \"round\" table per "
                                       "round (name, train, test, holdout, target_ce, time limits, explanations) "
                                       "registered at start; without it the service starts empty "
                                       "and organisers add rounds by API."),
    workers: int = typer.Option(1, "--workers", min=0, max=64, help="Worker processes that score submissions "
                                "(0: web server only, run workers elsewhere against the same --db)."),
    data_dir: Path = typer.Option(Path("leaderboard-data"), "--data-dir", help="Where uploads, extracted "
                                  "submissions and job folders live."),
    access_log: bool = typer.Option(True, "--access-log/--no-access-log", help="Log every HTTP request."),
    insecure_no_sandbox: bool = typer.Option(
        False, "--insecure-no-sandbox", help="Run submissions WITHOUT the bubblewrap sandbox: a submission can "
        "then read the test labels, the database and other teams' files, and reach the network. Only for "
        "submissions you trust; every page says this mode is on. Without this flag, serve refuses to start "
        "workers where bubblewrap cannot isolate them."),
) -> None:
    """Run the leaderboard: web pages + HTTP API on HOST:PORT and N scoring workers; Ctrl-C stops them all.

    Organiser actions need TROJANSCOPE_ADMIN_TOKEN set in the environment (never on the command line); serve
    takes it out of its own environment at start, so no worker or detector process carries it. Every detector
    run (configure, smoke, test, holdout, harvest) is isolated with bubblewrap (no network, an unprivileged
    uid, only the model and the submission visible; docs/leaderboard-security.md); other limits are
    TROJANSCOPE_* variables (docs/leaderboard-operations.md). Example:

      TROJANSCOPE_ADMIN_TOKEN=$(openssl rand -hex 24) trojanscope serve --db sqlite:///lb.db --rounds rounds.toml
    """
    from trojanscope.leaderboard.server import hide_admin_token, run_server, take_admin_token
    from trojanscope.leaderboard.settings import Settings

    hide_admin_token()  # re-executes this command with the token out of every process's environment
    settings = Settings.from_env(db_url=db, data_dir=data_dir.resolve(), admin_token=take_admin_token(),
                                 isolation="none" if insecure_no_sandbox else None)
    if workers and settings.isolation == "bwrap":
        from trojanscope.leaderboard.sandbox import isolation_problem

        if (problem := isolation_problem()) is not None:
            raise typer.BadParameter(f"{problem}; submissions cannot be isolated, so serve will not score them. "
                                     "Fix that, or pass --insecure-no-sandbox to run only submissions you trust",
                                     param_hint="sandbox")
    if settings.isolation == "none":
        typer.echo("warning: submissions run WITHOUT a sandbox (--insecure-no-sandbox): they can read test labels "
                   "and reach the network", err=True)
    run_server(settings, host=host, port=port, rounds=rounds, workers=workers, access_log=access_log)


def register(app: typer.Typer, zoo: typer.Typer) -> None:  # noqa: ARG001 - zoo sub-app unused here
    """Add ``serve`` and ``rounds download`` to the top-level CLI."""
    rounds_app = typer.Typer(help="Rounds on a leaderboard server, as a team sees them.", no_args_is_help=True)
    app.add_typer(rounds_app, name="rounds")
    rounds_app.command("download")(download)
    app.command("serve")(serve)
