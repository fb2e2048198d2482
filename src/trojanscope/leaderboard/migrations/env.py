"""Alembic environment for the leaderboard database (SQLite or PostgreSQL).

``trojanscope.leaderboard.db.init_db`` runs the migrations in-process with its own connection
(``config.attributes["connection"]``); ``alembic -c ... upgrade head`` with ``sqlalchemy.url`` set also works.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import engine_from_config, pool

from trojanscope.leaderboard.db import Base

config = context.config
target_metadata = Base.metadata


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata,
                          render_as_batch=connection.dialect.name == "sqlite")
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = engine_from_config(config.get_section(config.config_ini_section, {}), prefix="sqlalchemy.",
                                poolclass=pool.NullPool)
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=target_metadata,
                          render_as_batch=conn.dialect.name == "sqlite")
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata,
                      literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    run()
