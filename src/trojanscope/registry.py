"""A small generic registry for plug-ins (corpora, encoders, detectors, presets, ...).

Entries are either objects or lazy ``"module:attr"`` strings so listing plug-ins never imports
heavy code. An unknown name answers with the closest matches and the full list.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from trojanscope.errors import RegistryError

T = TypeVar("T")


class Registry(Generic[T]):
    """Name → plug-in mapping with lazy import and helpful errors."""

    def __init__(self, kind: str, loader: Callable[[], None] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, T | str] = {}
        self._help: dict[str, str] = {}
        # called before every lookup: registers entries declared elsewhere (e.g. by modality plug-ins) on
        # first use, so importing the registry never imports them; it must be cheap once done
        self.loader = loader
        self._loading = False

    def _load(self) -> None:
        if self.loader is None or self._loading:
            return
        self._loading = True
        try:
            self.loader()
        finally:
            self._loading = False

    def register(self, name: str, obj: T | str | None = None, *, help: str = "") -> Callable[[T], T] | None:
        """Register ``obj`` under ``name``; without ``obj`` works as a decorator."""
        if obj is None:

            def deco(o: T) -> T:
                self._add(name, o, help)
                return o

            return deco
        self._add(name, obj, help)
        return None

    def _add(self, name: str, obj: T | str, help: str) -> None:
        if name in self._entries and self._entries[name] is not obj:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = obj
        if help or name not in self._help:
            self._help[name] = help

    def unregister(self, name: str) -> None:
        """Remove ``name`` (a plug-in registered for a test or a session only); unknown names are ignored."""
        self._entries.pop(name, None)
        self._help.pop(name, None)

    def get(self, name: str) -> T:
        self._load()
        if name not in self._entries:
            close = difflib.get_close_matches(name, self._entries, n=3)
            hint = f" did you mean {', '.join(close)}?" if close else ""
            raise RegistryError(
                f"unknown {self.kind} {name!r};{hint} available: {', '.join(sorted(self._entries)) or 'none'}"
            )
        obj = self._entries[name]
        if isinstance(obj, str) and ":" in obj:
            module, attr = obj.split(":", 1)
            obj = getattr(importlib.import_module(module), attr)
            self._entries[name] = obj
        return obj  # type: ignore[return-value]

    def module_of(self, name: str) -> str | None:
        """The module that defines entry ``name``, without importing it (None for an unknown name)."""
        self._load()
        if name not in self._entries:
            return None
        obj = self._entries[name]
        if isinstance(obj, str):
            return obj.split(":", 1)[0]
        return getattr(obj, "__module__", None)

    def help(self, name: str) -> str:
        self._load()
        return self._help.get(name, "")

    def names(self) -> list[str]:
        self._load()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
