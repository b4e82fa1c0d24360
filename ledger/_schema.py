"""The ledger's schema, grown by migrations.

``MIGRATIONS[i]`` brings a database from version ``i`` to ``i + 1``; the version
lives in ``PRAGMA user_version`` (0 = empty file).  Each step runs in its own
``BEGIN IMMEDIATE`` transaction together with the version bump, so a crash
mid-migration leaves the previous version intact and two processes opening the
same file at once cannot both apply a step.  Never edit a released migration:
append a new one.

Version 2 schema (what ``sqlite3 ledger.db .schema`` shows, modulo quoting)::

    events(id INTEGER PRIMARY KEY, ts REAL NOT NULL, epoch INTEGER NOT NULL,
           kind TEXT NOT NULL, agent TEXT, session TEXT, token INTEGER,
           data TEXT NOT NULL)               -- data: compact JSON object
    index events_kind(kind), index events_agent(agent)
    trigger events_no_update, events_no_delete   -- append-only: RAISE(ABORT)
    snapshots(upto INTEGER PRIMARY KEY, ts REAL, blob BLOB)
    meta(key TEXT PRIMARY KEY, value TEXT)

Version 3: ``events_no_delete`` refuses a DELETE unless the row's id is below
``meta.removable_below`` (compaction sets it to the id of the registry snapshot that
covers the rows it removes; absent, nothing is removable).  Before, compaction dropped
and re-created the trigger around every slice: two schema changes a slice, which made
every connection re-read the schema and re-prepare its statements.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from sqlite_utils import Database

from ._errors import LedgerVersionError

APPEND_ONLY_MESSAGE = "events is append-only: rows cannot be updated or deleted"


def _v1_events(db: Database) -> None:
    """The event log itself, indexed for ``kinds=`` filters and per-agent queries."""
    db.create_table(
        "events",
        {
            "id": int,
            "ts": float,
            "epoch": int,
            "kind": str,
            "agent": str,
            "session": str,
            "token": int,
            "data": str,
        },
        pk="id",
        not_null={"ts", "epoch", "kind", "data"},
    )
    db["events"].create_index(["kind"], index_name="events_kind")
    db["events"].create_index(["agent"], index_name="events_agent")
    for action in ("UPDATE", "DELETE"):
        db.execute(
            f"CREATE TRIGGER events_no_{action.lower()} BEFORE {action} ON events "
            f"BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY_MESSAGE}'); END"
        )


def _v2_snapshots_and_meta(db: Database) -> None:
    """Registry snapshots (replay starts after ``upto``) and a small key/value table."""
    db.create_table("snapshots", {"upto": int, "ts": float, "blob": bytes}, pk="upto")
    db.create_table("meta", {"key": str, "value": str}, pk="key")


REMOVABLE_BELOW = "removable_below"  # meta key: events with a smaller id may be removed


def _v3_removable_below(db: Database) -> None:
    """Deletes allowed below ``meta.removable_below`` only (compaction, in slices)."""
    db.execute("DROP TRIGGER IF EXISTS events_no_delete")
    db.execute(
        "CREATE TRIGGER events_no_delete BEFORE DELETE ON events "
        f"WHEN OLD.id >= coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = '{REMOVABLE_BELOW}'), 0) "
        f"BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY_MESSAGE}'); END"
    )


MIGRATIONS: tuple[Callable[[Database], None], ...] = (_v1_events, _v2_snapshots_and_meta, _v3_removable_below)
SCHEMA_VERSION = len(MIGRATIONS)


def user_version(conn: sqlite3.Connection) -> int:
    return conn.execute("PRAGMA user_version").fetchone()[0]


def check_version(version: int, path: str) -> None:
    if version > SCHEMA_VERSION:
        raise LedgerVersionError(
            f"ledger {path} has schema version {version}, newer than this Lockstep "
            f"understands ({SCHEMA_VERSION}); upgrade Lockstep"
        )


def migrate(db: Database, path: str, *, target: int = SCHEMA_VERSION) -> tuple[int, ...]:
    """Apply the missing migrations up to ``target``; return the versions reached.

    ``db.conn`` must be in autocommit mode (``isolation_level=None``) and not in a
    transaction.  Re-running on an up-to-date database does nothing and returns ``()``.
    """
    conn = db.conn
    applied: list[int] = []
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = user_version(conn)  # re-read under the write lock
            check_version(version, path)
            if version >= target:
                conn.execute("COMMIT")
                return tuple(applied)
            MIGRATIONS[version](db)
            conn.execute(f"PRAGMA user_version = {version + 1:d}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        applied.append(version + 1)
