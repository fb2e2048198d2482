"""Database schema (SQLAlchemy 2) and its migrations (Alembic).

SQLite is the default (WAL mode so the server and worker processes can share one file); PostgreSQL
(``postgresql+psycopg://...``, ``pip install 'trojanscope[postgres]'``) is the production database for
several workers on several hosts. ``init_db`` brings any database to the newest schema with the Alembic
revisions in ``leaderboard/migrations/versions`` (the same revisions for both backends); a database
created before migrations were Alembic's is stamped as revision 0001 first. A database at a revision this
code does not know (made by a newer trojanscope) is refused.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    false,
    inspect,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship, sessionmaker

from trojanscope.errors import ConfigError

MIGRATIONS_DIR = Path(__file__).parent / "migrations"

ROUND_STATUSES = ("pending", "open", "closed")
STAGES = ("configure", "smoke", "test", "holdout", "harvest")
HARVEST_STATUSES = ("queued", "done", "failed")
JOB_STATUSES = ("queued", "running", "done", "failed")
SUBMISSION_STATUSES = ("queued", "configure", "configure_failed", "smoke", "smoke_failed", "scoring", "scored",
                       "failed")


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class Round(Base):
    __tablename__ = "rounds"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    title: Mapped[str] = mapped_column(String(200), default="")
    train_dir: Mapped[str] = mapped_column(Text)
    test_dir: Mapped[str] = mapped_column(Text)
    holdout_dir: Mapped[str | None] = mapped_column(Text, nullable=True)
    target_ce: Mapped[float | None] = mapped_column(Float, nullable=True)
    smoke_models: Mapped[int] = mapped_column(Integer, default=10)
    model_time_limit_s: Mapped[float] = mapped_column(Float, default=600.0)
    submission_time_limit_s: Mapped[float] = mapped_column(Float, default=36 * 3600.0)
    smoke_time_limit_s: Mapped[float] = mapped_column(Float, default=1800.0)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    # the explanation tracks (target class, trigger) are scored on the test and holdout splits
    explanations: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    opened_at: Mapped[dt.datetime | None] = mapped_column(DateTime, nullable=True)
    closed_at: Mapped[dt.datetime | None] = mapped_column(DateTime, nullable=True)


class Team(Base):
    __tablename__ = "teams"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    token_hash: Mapped[str] = mapped_column(String(256))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)


class Submission(Base):
    __tablename__ = "submissions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    round_id: Mapped[int] = mapped_column(ForeignKey("rounds.id"), index=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"), index=True)
    filename: Mapped[str] = mapped_column(String(255))
    size_bytes: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(String(64))
    command: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default="queued")
    message: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow, index=True)
    round: Mapped[Round] = relationship()
    team: Mapped[Team] = relationship()
    jobs: Mapped[list[Job]] = relationship(back_populates="submission", order_by="Job.id")


class Job(Base):
    """One stage (configure, smoke, test, holdout, or harvest: building the next round against it) of one
    submission: the unit a worker claims."""

    __tablename__ = "jobs"
    __table_args__ = (UniqueConstraint("submission_id", "stage"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id"), index=True)
    stage: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), default="queued", index=True)
    priority: Mapped[int] = mapped_column(Integer, default=0)  # lower runs first (smoke before test)
    worker_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    lease_until: Mapped[dt.datetime | None] = mapped_column(DateTime, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    model_map: Mapped[dict | None] = mapped_column(JSON, nullable=True)  # neutral name -> real name, run order
    scores: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    runtime_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    started_at: Mapped[dt.datetime | None] = mapped_column(DateTime, nullable=True)
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime, nullable=True)
    submission: Mapped[Submission] = relationship(back_populates="jobs")
    results: Mapped[list[ModelResult]] = relationship(back_populates="job", order_by="ModelResult.id")


class ModelResult(Base):
    """One model's outcome in one job; the unique key is what makes "each model scored once" hold."""

    __tablename__ = "model_results"
    __table_args__ = (UniqueConstraint("job_id", "model_name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    model_name: Mapped[str] = mapped_column(String(64))
    neutral_name: Mapped[str] = mapped_column(String(64))
    probability: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(Text, default="")
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    ground_truth: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    job: Mapped[Job] = relationship(back_populates="results")


class Harvest(Base):
    """An organiser's request to build the next round (``name``) from what a closed round's top submission
    gets wrong: its ``harvest`` job scores candidate pools with the submission in the jail; the round is
    registered only when every split is built. The name is reserved from the request on."""

    __tablename__ = "harvests"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    source_round_id: Mapped[int] = mapped_column(ForeignKey("rounds.id"), index=True)
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id"))
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), unique=True)
    spec: Mapped[dict] = mapped_column(JSON)  # the request: preset, split sizes, candidates, round settings
    status: Mapped[str] = mapped_column(String(16), default="queued")
    round_id: Mapped[int | None] = mapped_column(ForeignKey("rounds.id"), nullable=True)  # set when registered
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    source_round: Mapped[Round] = relationship(foreign_keys=[source_round_id])
    submission: Mapped[Submission] = relationship()
    job: Mapped[Job] = relationship()


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and foreign keys so processes can share it.
    A URL SQLAlchemy cannot parse, or whose driver is not installed, is one ConfigError line."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        shown = make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        raise ConfigError(f"--db {url!r} is not a database URL; use sqlite:///FILE or "
                          "postgresql+psycopg://USER@HOST/DB") from None
    try:
        return _engine(url)
    except (NoSuchModuleError, ImportError) as exc:
        raise ConfigError(f"--db {shown}: no database driver for it ({exc}); use sqlite:///FILE or "
                          "postgresql+psycopg://... with pip install 'trojanscope[postgres]'") from None


def _engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    # a host that never answers fails in seconds, not after the operating system's TCP timeout
    args = {"connect_timeout": 10} if url.startswith("postgresql") and "connect_timeout" not in url else {}
    return create_engine(url, pool_pre_ping=True, connect_args=args)


def alembic_config(connection: Connection | None = None):  # type: ignore[no-untyped-def]
    """An Alembic config for the packaged migrations, bound to ``connection`` when given."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def init_db(engine: Engine) -> str:
    """Upgrade the database to the newest schema revision; return that revision."""
    from alembic import command
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory
    from alembic.util.exc import CommandError

    script = ScriptDirectory.from_config(alembic_config())
    head = script.get_current_head()
    where = engine.url.render_as_string(hide_password=True)
    _check_connects(engine, where)
    with engine.begin() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
        if current is None and inspect(conn).has_table("rounds"):
            command.stamp(alembic_config(conn), "0001")  # made by trojanscope before its migrations were Alembic's
            current = "0001"
        known = {rev.revision for rev in script.walk_revisions()}
        if current is not None and current not in known:
            raise ConfigError(f"{where}: database schema revision {current} is newer than this trojanscope "
                              f"(newest known: {head}); upgrade trojanscope or use another --db")
        try:
            command.upgrade(alembic_config(conn), "head")
        except CommandError as exc:
            raise ConfigError(f"{where}: schema migration failed ({exc}); restore a backup or use another --db"
                              ) from None
    return head


def _check_connects(engine: Engine, where: str) -> None:
    from sqlalchemy.exc import DBAPIError

    try:
        with engine.connect():
            pass
    except DBAPIError as exc:
        first = str(exc.orig or exc).strip().splitlines()[0][:200]
        raise ConfigError(f"--db {where}: cannot connect ({first}); check that the server runs and the host, "
                          "port, database and credentials (PGPASSWORD or ~/.pgpass) are right") from None


def make_sessionmaker(url: str) -> sessionmaker:
    """Engine + schema check + a session factory (objects stay readable after commit)."""
    engine = make_engine(url)
    init_db(engine)
    return sessionmaker(engine, expire_on_commit=False)
