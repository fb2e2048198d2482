"""One settings object for the server and the workers, read from ``TROJANSCOPE_*`` environment variables.

``Settings.from_env(**overrides)`` reads e.g. ``TROJANSCOPE_DB_URL``, ``TROJANSCOPE_ADMIN_TOKEN``,
``TROJANSCOPE_MAX_UPLOAD_BYTES``; explicit overrides (CLI options, tests) win over the environment.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from trojanscope.errors import ConfigError

ENV_PREFIX = "TROJANSCOPE_"
MiB = 1024 * 1024


class Settings(BaseModel):
    """Everything the service needs; every field can be set as ``TROJANSCOPE_<FIELD>``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    db_url: str = "sqlite:///leaderboard.db"
    data_dir: Path = Path("leaderboard-data")        # uploads, extracted submissions, job folders
    admin_token: SecretStr | None = None               # organiser token; without it no organiser action works
    # uploads
    max_upload_bytes: int = Field(50 * MiB, gt=0)
    max_extracted_bytes: int = Field(200 * MiB, gt=0)
    max_files: int = Field(2000, gt=0)
    rate_limit_count: int = Field(5, ge=1)             # submissions per team ...
    rate_limit_window_s: float = Field(3600.0, gt=0)  # ... per this many seconds
    # sandbox: "bwrap" isolates every detector run (docs/leaderboard-security.md); "none" is process hygiene only,
    # for trusted submissions (serve --insecure-no-sandbox)
    isolation: Literal["bwrap", "none"] = "bwrap"
    sandbox_uid_base: int = Field(1_900_000_000, gt=0, lt=4_200_000_000)  # as root: job N runs as base + N
    sandbox_tmp_bytes: int = Field(512 * MiB, gt=0)   # the detector's private /tmp (its HOME), held in memory
    # sandbox limits per detector process
    memory_bytes: int | None = Field(8192 * MiB, gt=0)  # RLIMIT_AS: address space, not resident memory
    max_processes: int | None = Field(512, gt=0)     # RLIMIT_NPROC: per sandbox uid (see isolation)
    file_size_bytes: int | None = Field(512 * MiB, gt=0)
    configure_time_limit_s: float = Field(3600.0, gt=0)  # a submission's configure step, all train models
    # queue
    lease_s: float = Field(60.0, gt=0)                 # a running job whose lease expired is re-queued
    heartbeat_s: float = Field(5.0, gt=0)
    poll_s: float = Field(1.0, gt=0)
    max_attempts: int = Field(3, ge=1)                 # worker crashes tolerated per job before it fails

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: object) -> Settings:
        """Settings from ``TROJANSCOPE_*`` variables, then ``overrides`` (``None`` values are ignored)."""
        environ = dict(os.environ if environ is None else environ)
        values: dict[str, object] = {}
        for name in cls.model_fields:
            key = ENV_PREFIX + name.upper()
            if key in environ and environ[key] != "":
                values[name] = environ[key]
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**values)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"])
            raise ConfigError(
                f"leaderboard setting {field}={err.get('input')!r}: {err['msg']} "
                f"(set it with --{field.replace('_', '-')} or {ENV_PREFIX}{field.upper()})"
            ) from None

    def admin_secret(self) -> str | None:
        return self.admin_token.get_secret_value() if self.admin_token else None
