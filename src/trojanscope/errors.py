"""One error hierarchy for trojanscope.

Every error raised for bad input is a :class:`TrojanscopeError`. Its message is one line that
names the offending file or value and, where there is one, the fix. The CLI prints the message
and exits non-zero; it never prints a traceback for these.
"""

from __future__ import annotations


class TrojanscopeError(Exception):
    """Base class: a user-facing, one-line error."""

    exit_code = 2


class ConfigError(TrojanscopeError):
    """A preset, config file or option has an invalid value."""


class DataError(TrojanscopeError):
    """A corpus or example file is missing, corrupt or in the wrong format."""


class ModelFileError(TrojanscopeError):
    """A model file cannot be loaded (corrupt, mismatched, or refused as unsafe)."""


class UnsafeModelFileError(ModelFileError):
    """A pickle names a global outside the allow-list; nothing from it was executed."""


class LayoutError(TrojanscopeError):
    """A zoo or model folder does not follow the TrojAI layout."""


class NotFittedError(TrojanscopeError):
    """A detector was used before `fit` (or before its parameters were loaded)."""


class RegistryError(TrojanscopeError, KeyError):
    """An unknown plug-in name."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""
