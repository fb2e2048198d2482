"""Database schema (SQLAlchemy 2) and a versioned upgrade path.

SQLite is the default (WAL mode so the server and worker processes can share one file); any
SQLAlchemy URL works (PostgreSQL: ``postgresql+psycopg://...``). ``init_db`` creates missing tables,
records the schema version in ``schema_version`` and applies the numbered upgrade steps in
:data:`MIGRATIONS` to older databases. A database newer than this code is refused.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

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
    select,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship, sessionmaker

from trojanscope.errors import ConfigError

SCHEMA_VERSION = 1
# version -> step that upgrades a database from version-1 to version (run inside one transaction).
MIGRATIONS: dict[int, Callable[[Connection], None]] = {}

ROUND_STATUSES = ("pending", "open", "closed")
STAGES = ("configure", "smoke", "test", "holdout")
JOB_STATUSES = ("queued", "running", "done", "failed")
SUBMISSION_STATUSES = ("queued", "configure", "configure_failed", "smoke", "smoke_failed", "scoring", "scored",
                       "failed")


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class SchemaVersion(Base):
    __tablename__ = "schema_version"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(Integer)


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
    """One stage (configure, smoke, test or holdout) of one submission: the unit a worker claims."""

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


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and foreign keys so processes can share it."""
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
    return create_engine(url, pool_pre_ping=True)


def init_db(engine: Engine) -> int:
    """Create missing tables and upgrade an older schema; return the schema version now in use."""
    Base.metadata.create_all(engine)
    with engine.begin() as conn:
        row = conn.execute(select(SchemaVersion.version).where(SchemaVersion.id == 1)).scalar_one_or_none()
        if row is None:
            conn.execute(SchemaVersion.__table__.insert().values(id=1, version=SCHEMA_VERSION))
            return SCHEMA_VERSION
        if row > SCHEMA_VERSION:
            raise ConfigError(
                f"{engine.url.render_as_string(hide_password=True)}: database schema v{row} is newer than this "
                f"trojanscope (v{SCHEMA_VERSION}); upgrade trojanscope or use another --db"
            )
        for version in range(row + 1, SCHEMA_VERSION + 1):
            MIGRATIONS[version](conn)
            conn.execute(SchemaVersion.__table__.update().where(SchemaVersion.id == 1).values(version=version))
    return SCHEMA_VERSION


def make_sessionmaker(url: str) -> sessionmaker:
    """Engine + schema check + a session factory (objects stay readable after commit)."""
    engine = make_engine(url)
    init_db(engine)
    return sessionmaker(engine, expire_on_commit=False)
