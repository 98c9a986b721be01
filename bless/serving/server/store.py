"""Durable server state: the registered apps, in SQLite in the state directory.

Every change is one SQLite transaction (rollback journal, ``synchronous=FULL``):
a crash leaves either the old or the new state, never half of one.  Each row
keeps the registration (:class:`~bless.serving.server.spec.AppSpec`) and the profile
as it was deployed, so a restart brings back the same apps even if the
profile files changed or moved since.

One server owns a state directory: :class:`StateStore` holds an OS lock
(``fcntl.flock``) on ``<state_dir>/lock`` for its life, recording the holder's pid
and address there, so a second server on the same directory refuses to start and
says which one holds it (two writers would each serve, and overwrite, the other's
apps).  The kernel drops the lock when the process dies, so a crash leaves no
stale lock.  The directory is created 0700 and its files 0600: it holds the admin
token and what the apps are.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bless.profiles.format import Profile, profile_from_dict
from bless.serving.server.errors import StartupError
from bless.serving.server.spec import AppSpec

log = logging.getLogger("bless.serving.server")

SCHEMA_VERSION = 1
FILENAME = "bless-state.sqlite3"
LOCK_FILE = "lock"
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


@dataclass(frozen=True)
class StoredApp:
    spec: AppSpec
    profile: Profile


@dataclass(frozen=True)
class UnreadableApp:
    """A stored row that no longer decodes (written by another bless, or damaged)."""

    name: str
    error: str


def private_file(path: Path) -> None:
    """Create ``path`` readable by its owner only, or make an existing one so."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE))
    os.chmod(path, PRIVATE_FILE)


def private_dir(path: Path) -> None:
    """Create ``path`` 0700; warn (and change nothing) if it exists open to others."""
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        log.warning("state directory %s is accessible to group or others (mode %04o): chmod 700 %s", path, mode, path)


class StateLock:
    """The exclusive lock on a state directory, with its holder's pid and address."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / LOCK_FILE
        private_file(self.path)
        self._fd = os.open(self.path, os.O_RDWR)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._holder()
            os.close(self._fd)
            raise StartupError(
                f"state directory {state_dir} is in use by another bless server ({holder}); "
                f"stop that one, or give this one its own --state-dir"
            ) from None
        self.record(None)

    def _holder(self) -> str:
        try:
            held = json.loads(os.pread(self._fd, 4096, 0) or b"{}")
            pid, address = held["pid"], held.get("address")
        except (OSError, ValueError, KeyError, TypeError):
            return "pid unknown"
        return f"pid {pid}, serving {address}" if address else f"pid {pid}, still starting"

    def record(self, address: str | None) -> None:
        """Note who holds the lock, for the message a second server prints."""
        data = json.dumps({"pid": os.getpid(), "address": address}).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def release(self) -> None:
        os.ftruncate(self._fd, 0)
        os.close(self._fd)  # closing drops the flock


class StateStore:
    """The apps table; safe to call from any thread.  Holds the directory's lock until :meth:`close`."""

    def __init__(self, state_dir: Path) -> None:
        private_dir(state_dir)
        self.owner = StateLock(state_dir)
        self.path = state_dir / FILENAME
        self._lock = threading.Lock()
        try:
            private_file(self.path)  # sqlite would create it 0644; its journal copies these bits
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._init_schema()
        except BaseException:
            self.owner.release()
            raise

    def _init_schema(self) -> None:
        self._db.execute("PRAGMA synchronous=FULL")
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):
            self._db.close()
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

    def load(self) -> list[StoredApp | UnreadableApp]:
        """Every stored app, in registration order; a row that does not decode is
        returned as :class:`UnreadableApp`, so one bad row cannot keep the others down."""
        with self._lock:
            rows = self._db.execute("SELECT name, spec, profile FROM apps ORDER BY seq").fetchall()
        apps: list[StoredApp | UnreadableApp] = []
        for name, spec, profile in rows:
            try:
                apps.append(StoredApp(AppSpec.from_dict(json.loads(spec)), profile_from_dict(json.loads(profile))))
            except (ValueError, KeyError, TypeError) as e:  # bad JSON, a missing or mistyped field
                apps.append(UnreadableApp(name, f"its stored registration cannot be read ({type(e).__name__}: {e})"))
        return apps

    def close(self) -> None:
        with self._lock:
            self._db.close()
        self.owner.release()
