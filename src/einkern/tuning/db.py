"""The tuning database: one SQLite file, one row per measured variant.

The file carries an application id (``EINK``) and a schema version; a file that
is not SQLite, a SQLite file of another application or a corrupt one raises
:class:`TuningDatabaseError` and is never written.  It runs in WAL mode with a
busy timeout, so several tuners can share it, and every write is a transaction,
so killing a tuner mid-write loses at most the variant being written.

Besides the records, the ``verdicts`` table keeps the final side-by-side
comparison of every tuning run (:mod:`.verdict`); :meth:`TuningDB.champion`
is the configuration ``tune="cached"`` may use.  The table was added to schema
1 in place (``CREATE TABLE IF NOT EXISTS`` on open; einkerns that predate it
ignore it): records written before it load as they are, are resumed by tuning
runs and shown by ``db show``, but no record of a problem is used by
``tune="cached"`` until a tuning run of that problem confirms a winner.

Default location: ``$EINKERN_TUNING_DB``, else
``platformdirs.user_cache_dir("einkern")/tuning.sqlite``.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import platformdirs

from ..errors import EinkernError
from .ranking import pick_best
from .record import COLUMNS, TuningRecord, from_row, to_row
from .verdict import VERDICT_COLUMNS, Verdict, verdict_from_row, verdict_to_row

__all__ = ["TuningDB", "TuningDatabaseError", "TuningRecord", "default_path"]

APPLICATION_ID = 0x45494E4B  # "EINK"
SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 60.0
SQLITE_HEADER = b"SQLite format 3\x00"

_VERDICTS = """
CREATE TABLE IF NOT EXISTS verdicts (
    key TEXT NOT NULL, family TEXT NOT NULL, config TEXT NOT NULL, default_config TEXT NOT NULL,
    beats INTEGER NOT NULL, speedup REAL, reason TEXT NOT NULL, default_times TEXT NOT NULL,
    winner_times TEXT NOT NULL, rounds TEXT NOT NULL, timestamp REAL NOT NULL,
    PRIMARY KEY (key, timestamp, config)
)"""


_SCHEMA = f"""
CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE records (
    key TEXT NOT NULL, family TEXT NOT NULL, backend TEXT NOT NULL, device TEXT NOT NULL,
    version TEXT NOT NULL, statement TEXT NOT NULL, tensors TEXT NOT NULL,
    extents TEXT NOT NULL, dtypes TEXT NOT NULL, layouts TEXT NOT NULL, strides TEXT NOT NULL,
    alignment INTEGER NOT NULL, config TEXT NOT NULL, is_default INTEGER NOT NULL,
    status TEXT NOT NULL, reason TEXT NOT NULL, median REAL, times TEXT NOT NULL,
    error REAL, resources TEXT NOT NULL, timestamp REAL NOT NULL,
    PRIMARY KEY (key, config)
);
CREATE INDEX records_family ON records (family);
{_VERDICTS};
PRAGMA application_id = {APPLICATION_ID};
PRAGMA user_version = {SCHEMA_VERSION};
"""


class TuningDatabaseError(EinkernError):
    """The tuning database cannot be used (not ours, corrupt, newer, unwritable)."""


def default_path() -> Path:
    """``$EINKERN_TUNING_DB``, else ``tuning.sqlite`` in the user's cache directory."""
    configured = os.environ.get("EINKERN_TUNING_DB")
    if configured:
        return Path(configured)
    return Path(platformdirs.user_cache_dir("einkern")) / "tuning.sqlite"


class TuningDB:
    """An open tuning database (use as a context manager, or call :meth:`close`).

    ``create=False`` refuses to create a missing file (for read-only commands)."""

    def __init__(self, path: str | os.PathLike | None = None, *, create: bool = True):
        self.path = Path(path) if path is not None else default_path()
        self._lock = threading.Lock()
        self._connection = _open(self.path, create)

    def close(self) -> None:
        with self._lock:
            self._connection.close()

    def __enter__(self) -> TuningDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ------------------------------------------------------------

    def add(self, record: TuningRecord) -> bool:
        """Store ``record``; True when stored.  An existing record of the same problem
        and configuration is kept, unless it failed and ``record`` succeeded."""
        return self.add_many([record]) == 1

    def add_many(self, records: Iterable[TuningRecord]) -> int:
        """Store records in one transaction (see :meth:`add`); how many were stored."""
        stored = 0
        with self._transaction() as cursor:
            for record in records:
                found = cursor.execute(
                    "SELECT status, is_default FROM records WHERE key = ? AND config = ?",
                    (record.identity.key, record.config_key),
                ).fetchone()
                if found is None:
                    marks = ", ".join("?" * len(COLUMNS))
                    cursor.execute(f"INSERT INTO records VALUES ({marks})", to_row(record))
                    stored += 1
                elif found[0] != "ok" and record.ok:
                    cursor.execute(
                        "DELETE FROM records WHERE key = ? AND config = ?",
                        (record.identity.key, record.config_key),
                    )
                    marks = ", ".join("?" * len(COLUMNS))
                    cursor.execute(f"INSERT INTO records VALUES ({marks})", to_row(record))
                    stored += 1
                elif record.default and not found[1]:
                    cursor.execute(
                        "UPDATE records SET is_default = 1 WHERE key = ? AND config = ?",
                        (record.identity.key, record.config_key),
                    )
        return stored

    def add_verdict(self, verdict: Verdict) -> None:
        """Store the verdict of one tuning run (every run's verdict is kept)."""
        marks = ", ".join("?" * len(VERDICT_COLUMNS))
        with self._transaction() as cursor:
            cursor.execute(
                f"INSERT OR REPLACE INTO verdicts VALUES ({marks})", verdict_to_row(verdict)
            )

    def prune(
        self, *, failed: bool = True, stale_version: str | None = None, keep_best_only: bool = False
    ) -> int:
        """Delete failed records, records of einkern versions other than
        ``stale_version`` (when given) and, with ``keep_best_only``, every successful
        record but each problem's best and default.  Returns how many were deleted."""
        deleted = 0
        with self._transaction() as cursor:
            if failed:
                deleted += cursor.execute("DELETE FROM records WHERE status != 'ok'").rowcount
            if stale_version is not None:
                deleted += cursor.execute(
                    "DELETE FROM records WHERE version != ?", (stale_version,)
                ).rowcount
            if keep_best_only:
                keys = [row[0] for row in cursor.execute("SELECT DISTINCT key FROM records")]
                for key in keys:
                    rows = cursor.execute(
                        f"SELECT {', '.join(COLUMNS)} FROM records WHERE key = ?", (key,)
                    ).fetchall()
                    records = [from_row(row) for row in rows]
                    best = pick_best(r for r in records if r.ok)
                    keep = {r.config_key for r in records if r.default}
                    keep |= {
                        row[0]
                        for row in cursor.execute(
                            "SELECT config FROM verdicts WHERE key = ? AND beats = 1", (key,)
                        )
                    }
                    if best is not None:
                        keep.add(best.config_key)
                    for record in records:
                        if record.ok and record.config_key not in keep:
                            cursor.execute(
                                "DELETE FROM records WHERE key = ? AND config = ?",
                                (key, record.config_key),
                            )
                            deleted += 1
            cursor.execute("DELETE FROM verdicts WHERE key NOT IN (SELECT key FROM records)")
        return deleted

    # -- reading ------------------------------------------------------------

    def get(self, key: str, config_key: str) -> TuningRecord | None:
        """The record of one configuration of problem ``key``."""
        rows = self._select("WHERE key = ? AND config = ?", (key, config_key))
        return rows[0] if rows else None

    def records(self, key: str | None = None) -> list[TuningRecord]:
        """Every record (of problem ``key`` when given), oldest first."""
        if key is None:
            return self._select("", ())
        return self._select("WHERE key = ?", (key,))

    def family(self, family: str) -> list[TuningRecord]:
        """Every record of the problems of one family (same statement, any sizes)."""
        return self._select("WHERE family = ?", (family,))

    def best(self, key: str) -> TuningRecord | None:
        """The best successful record of problem ``key`` (ties broken as in
        :mod:`.ranking`), or None."""
        return pick_best(r for r in self.records(key) if r.ok)  # type: ignore[return-value]

    def verdicts(self, key: str | None = None) -> list[Verdict]:
        """Every verdict (of problem ``key`` when given), oldest first."""
        if key is None:
            return self._select_verdicts("", ())
        return self._select_verdicts("WHERE key = ?", (key,))

    def family_verdicts(self, family: str) -> list[Verdict]:
        """Every verdict of the problems of one family."""
        return self._select_verdicts("WHERE family = ?", (family,))

    def champion(self, key: str) -> Verdict | None:
        """The verdict ``tune="cached"`` follows for problem ``key``: of the runs whose
        winner beat the default side by side, the one with the largest same-run
        speedup (ties: the latest); None when no run's winner beat the default."""
        return champion(self.verdicts(key))

    def _select_verdicts(self, where: str, parameters: tuple[Any, ...]) -> list[Verdict]:
        query = (
            f"SELECT {', '.join(VERDICT_COLUMNS)} FROM verdicts {where} ORDER BY timestamp, config"
        )
        with self._lock:
            try:
                rows = self._connection.execute(query, parameters).fetchall()
            except sqlite3.OperationalError as error:
                if "no such table" in str(error):
                    return []  # a read-only file written before verdicts existed
                raise _database_error(self.path, error) from error
            except sqlite3.DatabaseError as error:
                raise _database_error(self.path, error) from error
        return [verdict_from_row(row) for row in rows]

    def _select(self, where: str, parameters: tuple[Any, ...]) -> list[TuningRecord]:
        query = f"SELECT {', '.join(COLUMNS)} FROM records {where} ORDER BY timestamp, config"
        with self._lock:
            try:
                rows = self._connection.execute(query, parameters).fetchall()
            except sqlite3.DatabaseError as error:
                raise _database_error(self.path, error) from error
        return [from_row(row) for row in rows]

    def _transaction(self) -> _Transaction:
        return _Transaction(self)


class _Transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on error) under the lock."""

    def __init__(self, db: TuningDB):
        self.db = db

    def __enter__(self) -> sqlite3.Cursor:
        self.db._lock.acquire()
        try:
            self.db._connection.execute("BEGIN IMMEDIATE")
        except sqlite3.DatabaseError as error:
            self.db._lock.release()
            raise _database_error(self.db.path, error) from error
        return self.db._connection.cursor()

    def __exit__(self, kind: object, error: object, traceback: object) -> None:
        try:
            if kind is None:
                self.db._connection.execute("COMMIT")
            else:
                self.db._connection.execute("ROLLBACK")
        except sqlite3.DatabaseError as failure:
            if kind is None:
                raise _database_error(self.db.path, failure) from failure
        finally:
            self.db._lock.release()
        if isinstance(error, sqlite3.DatabaseError):
            raise _database_error(self.db.path, error) from error


def champion(verdicts: Iterable[Verdict]) -> Verdict | None:
    """Of ``verdicts`` (of one problem), the winning one with the largest speedup
    (ties: the latest); None when none beat the default."""
    winners = [v for v in verdicts if v.beats]
    if not winners:
        return None
    return max(winners, key=lambda v: (v.speedup or 0.0, v.timestamp, v.config_key))


def _database_error(path: Path, error: sqlite3.Error) -> TuningDatabaseError:
    text = str(error)
    if "not a database" in text or "malformed" in text:
        return TuningDatabaseError(
            f"{path} is corrupt: {text}",
            hint="move it away (it is left untouched) or pass another --db",
        )
    return TuningDatabaseError(f"tuning database {path}: {text}")


def _open(path: Path, create: bool) -> sqlite3.Connection:
    if path.is_dir():
        raise TuningDatabaseError(f"{path} is a directory, not a tuning database")
    if path.exists():
        try:
            with open(path, "rb") as file:
                header = file.read(len(SQLITE_HEADER))
        except OSError as error:
            raise TuningDatabaseError(f"cannot read tuning database {path}: {error}") from error
        if header and header != SQLITE_HEADER:
            raise TuningDatabaseError(
                f"{path} is not an einkern tuning database (not an SQLite file)",
                hint="it is left untouched; pass another path with --db",
            )
    elif not create:
        raise TuningDatabaseError(f"no tuning database at {path}", hint="run `einkern tune` first")
    else:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise TuningDatabaseError(f"cannot create {path.parent}: {error}") from error
    try:
        connection = sqlite3.connect(
            str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as error:
        raise _database_error(path, error) from error
    try:
        _prepare(connection, path)
    except sqlite3.DatabaseError as error:
        connection.close()
        raise _database_error(path, error) from error
    except BaseException:
        connection.close()
        raise
    return connection


def _prepare(connection: sqlite3.Connection, path: Path) -> None:
    """Check the file is ours (creating the schema in an empty one), then use WAL."""
    connection.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")

    def identity() -> tuple[int, int]:
        """(application id, tables) read in one transaction: read apart, another
        process's creation could commit between them (seen: id 0 with 7 tables)."""
        own = not connection.in_transaction
        if own:
            connection.execute("BEGIN")
        try:
            application = connection.execute("PRAGMA application_id").fetchone()[0]
            tables = connection.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        finally:
            if own:
                connection.execute("COMMIT")
        return application, tables

    application, tables = identity()
    if application == 0 and tables == 0:
        connection.execute("BEGIN IMMEDIATE")
        try:
            application, tables = identity()  # another process may have created it
            if application == 0 and tables == 0:
                for statement in _SCHEMA.strip().split(";"):
                    if statement.strip():
                        connection.execute(statement)
                connection.execute(
                    "INSERT INTO meta VALUES ('created_by', ?)", (f"einkern {_version()}",)
                )
                application = APPLICATION_ID
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
    if application != APPLICATION_ID:
        raise TuningDatabaseError(
            f"{path} is an SQLite file of another application, not an einkern tuning database",
            hint="it is left untouched; pass another path with --db",
        )
    version = connection.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise TuningDatabaseError(
            f"{path} was written by a newer einkern (schema {version}, this one reads "
            f"{SCHEMA_VERSION})",
            hint="upgrade einkern, or use another --db",
        )
    try:
        connection.execute(_VERDICTS)  # files written before the verdicts table
    except sqlite3.OperationalError as error:
        if "readonly" not in str(error) and "locked" not in str(error):
            raise
    check = connection.execute("PRAGMA quick_check").fetchone()[0]
    if check != "ok":
        raise TuningDatabaseError(
            f"{path} is corrupt ({check})",
            hint="move it away (it is left untouched) or pass another --db",
        )
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            connection.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _version() -> str:
    from .canonical import einkern_version

    return einkern_version()
