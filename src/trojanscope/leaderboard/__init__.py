"""The leaderboard service: rounds, teams, sandboxed submissions, a job queue and web pages.

Importing this package is cheap (no FastAPI, SQLAlchemy or torch): the sandbox launcher
``python -m trojanscope.leaderboard.jail`` starts once per model and must stay fast.
Build the web app with :func:`trojanscope.leaderboard.app.create_app`; run workers with
:class:`trojanscope.leaderboard.worker.Worker`; both read :class:`trojanscope.leaderboard.settings.Settings`.
"""
