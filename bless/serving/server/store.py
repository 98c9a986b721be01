"""Durable server state: the registered apps, in SQLite in the state directory.

Every change is one SQLite transaction (rollback journal, ``synchronous=FULL``):
a crash leaves either the old or the new state, never half of one.  Each row
keeps the registration (:class:`~bless.serving.server.spec.AppSpec`) and the profile
as it was deployed, so a restart brings back the same apps even if the
profile files changed or moved since.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bless.profiles.format import Profile, profile_from_dict
from bless.serving.server.spec import AppSpec

SCHEMA_VERSION = 1
FILENAME = "bless-state.sqlite3"


@dataclass(frozen=True)
class StoredApp:
    spec: AppSpec
    profile: Profile


class StateStore:
    """The apps table; safe to call from any thread."""

    def __init__(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / FILENAME
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA synchronous=FULL")
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):
            raise RuntimeError(f"{self.path}: state schema version {version}, this bless reads {SCHEMA_VERSION}")
        with self._transaction():
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS apps ("
                " name TEXT PRIMARY KEY, seq INTEGER NOT NULL, spec TEXT NOT NULL, profile TEXT NOT NULL)"
            )
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def put(self, spec: AppSpec, profile: Profile) -> None:
        with self._transaction():
            seq = self._db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM apps").fetchone()[0]
            self._db.execute(
                "INSERT OR REPLACE INTO apps (name, seq, spec, profile) VALUES (?, ?, ?, ?)",
                (spec.name, seq, json.dumps(spec.to_dict()), json.dumps(profile.to_dict())),
            )

    def update_spec(self, spec: AppSpec) -> None:
        with self._transaction():
            cur = self._db.execute("UPDATE apps SET spec = ? WHERE name = ?", (json.dumps(spec.to_dict()), spec.name))
            if cur.rowcount != 1:
                raise KeyError(spec.name)

    def delete(self, name: str) -> None:
        with self._transaction():
            self._db.execute("DELETE FROM apps WHERE name = ?", (name,))

    def load(self) -> list[StoredApp]:
        """Every stored app, in registration order."""
        with self._lock:
            rows = self._db.execute("SELECT spec, profile FROM apps ORDER BY seq").fetchall()
        return [StoredApp(AppSpec.from_dict(json.loads(s)), profile_from_dict(json.loads(p))) for s, p in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()
