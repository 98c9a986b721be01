"""Name -> implementation registries, so backends and policies plug in by name.

A registry maps a short name (``sim``, ``cuda``, ``bless``, ``temporal``...) to a
factory.  Entries may be registered lazily by import path so that importing
:mod:`bless` never imports optional dependencies (the CUDA bindings, torch).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """A small named registry with helpful errors."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Callable[..., T] | str] = {}

    def register(self, name: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
        """Decorator: register a class or factory under ``name``."""

        def deco(factory: Callable[..., T]) -> Callable[..., T]:
            self._add(name, factory)
            return factory

        return deco

    def register_lazy(self, name: str, target: str) -> None:
        """Register ``module:attr``, imported on first use."""
        self._add(name, target)

    def _add(self, name: str, entry: Callable[..., T] | str) -> None:
        key = name.lower()
        existing = self._entries.get(key)
        if existing is not None and existing is not entry and not isinstance(existing, str):
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._entries[key] = entry

    def names(self) -> list[str]:
        return sorted(self._entries)

    def get(self, name: str) -> Callable[..., T]:
        key = name.lower()
        try:
            entry = self._entries[key]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; choose one of: {', '.join(self.names())}") from None
        if isinstance(entry, str):
            module, _, attr = entry.partition(":")
            entry = getattr(importlib.import_module(module), attr)
            self._entries[key] = entry
        return entry

    def create(self, name: str, *args: Any, **kwargs: Any) -> T:
        return self.get(name)(*args, **kwargs)
