"""Model-file fixtures (defined in ts_model_fixtures so tests can import the helpers too)."""

from ts_model_fixtures import model_factories, tiny_zoo  # noqa: F401
