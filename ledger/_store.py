"""Writer and readers of the ledger file.

The ledger is append-only, has one writer, and one logical batch is one
transaction:

* ``Ledger.append`` encodes and validates the whole batch first, then inserts it
  with one raw ``executemany`` inside one ``BEGIN IMMEDIATE ... COMMIT``: either
  every record of the batch is in the file, or none is (group commit).
* Triggers refuse ``UPDATE`` and ``DELETE`` on ``events`` (see ``_schema``), so
  ids are never reused and ``max(id)`` only grows; only ``compact`` removes rows, below
  a registry snapshot (it sets ``meta.removable_below``) and never the newest.  The writer hands out ids from
  its cached last id; a second writer on the same file is detected (primary-key
  conflict, the batch rolls back, ``LedgerError``) rather than interleaved.
* What is appended are the typed records of ``ledger.records`` (one Struct per kind);
  ``records()`` reads them back typed, ``events()`` as plain rows.
* Commits run with ``synchronous=NORMAL`` (survives a killed process, may lose
  the last commits on power loss); ``durable=True`` switches that one commit to
  ``synchronous=FULL`` and back.  ``Ledger.open(..., fsync_every_commit=True)`` runs
  every commit with ``FULL`` (WAL: the log is fsynced at each commit), so a returned
  ``append`` survives power loss too; one batch is one commit, so one fsync per batch.
* Auto-checkpoint is off.  The owner calls ``checkpoint()`` periodically, from a
  worker thread; it runs a PASSIVE checkpoint on a second connection, so it never
  blocks (or is blocked by) an append running in another thread; when idle,
  ``checkpoint(truncate=True)`` empties the WAL file; under a continuous stream of
  writes a PASSIVE checkpoint never catches up with the last frame, so the WAL is never
  restarted and grows: ``checkpoint(restart=True)`` (after a PASSIVE one has copied
  nearly everything) makes the next write start it over.
* Space: a new ledger is created with ``auto_vacuum=INCREMENTAL``; after ``compact``,
  ``vacuum_slice`` returns free pages to the file system a few at a time (the file
  shrinks at the next complete checkpoint).  An older ledger is converted once by
  ``convert_to_incremental`` (a full VACUUM: the owner decides when).

Connections: the write connection serves every method except ``events()``
(each iteration opens its own read-only connection, so it sees one consistent
snapshot and may be consumed while appends go on) and ``checkpoint()``.  A lock
per connection makes every method safe to call from any thread; the caller is
still expected to serialise appends so that ids are handed out in its order.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import msgspec
from sqlite_utils import Database
from sqlite_utils.db import NotFoundError

from ._errors import (
    InvalidRecord,
    LedgerClosed,
    LedgerError,
    LedgerMissing,
    LedgerVersionError,
)
from ._schema import (
    REMOVABLE_BELOW,
    SCHEMA_VERSION,
    check_version,
    migrate,
    user_version,
)
from .records import Record, decode, encode_data

__all__ = [
    "Checkpoint",
    "Event",
    "KEEP_SNAPSHOTS",
    "Ledger",
    "LedgerReader",
    "LedgerSpace",
    "LedgerStatistics",
    "open_readonly",
]

KEEP_SNAPSHOTS = 3
"""How many snapshots ``save_snapshot`` keeps (the newest by ``upto``)."""

BUSY_TIMEOUT_S = 5.0
TRUNCATE_WAIT_MS = 20  # how long a truncating checkpoint waits for readers and the writer
JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024  # a reset WAL is truncated back to this size
FILE_MODE = 0o600

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_COLUMNS = "id, ts, epoch, kind, agent, session, token, data"
_INSERT = f"INSERT INTO events ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
_MAX_ID = "SELECT coalesce(max(id), 0) FROM events"
COMPACT_SLICE = 500  # events removed per write transaction by ``Ledger.compact`` (a few ms each)
AUTO_VACUUM_INCREMENTAL = 2  # PRAGMA auto_vacuum
_ALLOW_REMOVAL = f"INSERT OR REPLACE INTO meta (key, value) VALUES ('{REMOVABLE_BELOW}', ?)"
_COMPACT_SLICE = """
DELETE FROM events WHERE id IN (
  SELECT id FROM events
  WHERE id < :upto AND id < (SELECT max(id) FROM events) AND ts < :before
    AND kind NOT LIKE 'plan.%'
    AND kind NOT IN ('land.queued', 'land.landed', 'land.refused')
    AND NOT (kind = 'job.started' AND json_extract(data, '$.kind') = 'plan')
    AND id NOT IN (
      SELECT max(id) FROM events
      WHERE kind = 'probe.result' AND json_extract(data, '$.kind') = 'build'
      GROUP BY json_extract(data, '$.target'))
  ORDER BY id LIMIT :rows)
"""


class Event(msgspec.Struct, frozen=True):
    """One row of ``events``.  ``ts`` is the wall-clock time of its batch's append."""

    id: int
    ts: float
    epoch: int
    kind: str
    agent: str | None
    session: str | None
    token: int | None
    data: dict


class LedgerStatistics(msgspec.Struct, frozen=True):
    """A snapshot of counters; counters cover this ``Ledger`` object only."""

    path: str
    schema_version: int
    last_id: int
    events_appended: int
    transactions: int  # committed write transactions (appends, snapshots, meta)
    durable_transactions: int
    checkpoints: int
    db_size_bytes: int
    wal_size_bytes: int
    migrations_applied: tuple[int, ...] = ()
    fsync_every_commit: bool = False  # synchronous=FULL at every commit (fsync = "power-loss")


class LedgerSpace(msgspec.Struct, frozen=True):
    """How the file's pages are used (``PRAGMA page_count`` / ``freelist_count``)."""

    page_size: int
    pages: int  # the file's pages
    free_pages: int  # pages no table uses: reused by new rows, or returned by vacuum_slice
    incremental: bool  # auto_vacuum=INCREMENTAL: free pages can be returned

    @property
    def used_bytes(self) -> int:
        return (self.pages - self.free_pages) * self.page_size


class Checkpoint(msgspec.Struct, frozen=True):
    """Result of one PASSIVE checkpoint (``PRAGMA wal_checkpoint`` columns)."""

    busy: bool
    wal_frames: int
    checkpointed_frames: int


# ---------------------------------------------------------------- encoding

_encode_json = msgspec.json.Encoder().encode
_decode_json = msgspec.json.Decoder(dict).decode
_ENCODE_ERRORS = (TypeError, ValueError, OverflowError, RecursionError, msgspec.MsgspecError)


def _encode_batch(records: Sequence[Record], epoch: int) -> list[tuple]:
    """Validate and encode every record before any I/O: a bad record fails the batch.

    Struct construction does not check types, so the columns are checked here."""
    if type(epoch) is not int or epoch < 0:
        raise InvalidRecord(f"epoch must be a non-negative int, not {epoch!r}")
    rows = []
    for i, r in enumerate(records):
        if not isinstance(r, Record):
            raise InvalidRecord(f"records[{i}] is a {type(r).__name__}, not a Record")
        kind, agent, session, token = r.KIND, r.agent, r.session, r.token
        if type(kind) is not str or not kind:
            raise InvalidRecord(f"records[{i}] ({type(r).__name__}) has no kind (an empty KIND)")
        if agent is not None and type(agent) is not str:
            raise InvalidRecord(f"records[{i}].agent must be str or None, not {agent!r}")
        if session is not None and type(session) is not str:
            raise InvalidRecord(f"records[{i}].session must be str or None, not {session!r}")
        if token is not None and (type(token) is not int or not _INT64_MIN <= token <= _INT64_MAX):
            raise InvalidRecord(f"records[{i}].token must be a 64-bit int or None, not {token!r}")
        try:
            text = encode_data(r).decode()
        except _ENCODE_ERRORS as e:
            raise InvalidRecord(f"records[{i}] ({kind}): data is not JSON-encodable: {e}") from e
        rows.append((epoch, kind, agent, session, token, text))
    return rows


def _event(row: tuple, path: str) -> Event:
    id_, ts, epoch, kind, agent, session, token, data = row
    try:
        return Event(id_, ts, epoch, kind, agent, session, token, _decode_json(data))
    except (TypeError, msgspec.MsgspecError) as e:  # a row written by hand, or a damaged file
        raise LedgerError(f"ledger {path}: event {id_} ({kind}) has data that is not a JSON object: {e}") from None


def _events_query(after: int, kinds: Iterable[str] | None, agent: str | None = None) -> tuple[str, list] | None:
    if type(after) is not int:
        raise InvalidRecord(f"after must be an int, not {after!r}")
    sql = f"SELECT {_COLUMNS} FROM events WHERE id > ?"
    params: list = [after]
    if agent is not None:  # the events_agent index
        sql += " AND agent = ?"
        params.append(agent)
    if kinds is not None:
        if isinstance(kinds, str):
            raise InvalidRecord(f"kinds must be an iterable of str, not the str {kinds!r}")
        wanted = list(dict.fromkeys(kinds))
        if not wanted:
            return None
        sql += f" AND kind IN ({', '.join('?' * len(wanted))})"
        params += wanted
    return sql + " ORDER BY id", params


# ---------------------------------------------------------------- connections


def _connect_readonly(path: Path) -> sqlite3.Connection:
    """A read-only connection (URI ``mode=ro``); never creates the file."""
    if not path.is_file():
        raise LedgerMissing(path)
    try:
        return sqlite3.connect(
            path.absolute().as_uri() + "?mode=ro",
            uri=True,
            timeout=BUSY_TIMEOUT_S,
            isolation_level=None,
            check_same_thread=False,
        )
    except sqlite3.Error as e:
        if not path.exists():
            raise LedgerMissing(path) from e
        raise LedgerError(f"cannot open ledger {path} read-only: {e}") from e


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


# ---------------------------------------------------------------- reader


class LedgerReader:
    """Read access to a ledger; what ``open_readonly`` returns, and ``Ledger``'s base.

    Every method is thread-safe.  Use as a context manager or call ``close()``.
    """

    def __init__(self, path: Path, conn: sqlite3.Connection, version: int) -> None:
        self._path = path
        self._conn = conn
        self._db = Database(conn, execute_plugins=False)
        self._version = version
        self._lock = threading.Lock()
        self._closed = False

    @property
    def path(self) -> Path:
        return self._path

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} {str(self._path)!r} {state}>"

    @contextmanager
    def _locked(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._closed:
                raise LedgerClosed(f"ledger {self._path} is closed")
            try:
                yield self._conn
            except sqlite3.Error as e:
                raise LedgerError(f"ledger {self._path}: {e}") from e

    def events(self, after: int = 0, *, kinds: Iterable[str] | None = None, agent: str | None = None) -> Iterator[Event]:
        """Events with ``id > after`` in id order, optionally only the given kinds, and
        only those of one ``agent``.

        Streamed from a private read-only connection opened on the first ``next()``
        and closed when the iterator is exhausted, closed or collected; the whole
        iteration sees one snapshot (appends committed meanwhile are not seen).
        Keep iterations short on a running coordinator: an open read snapshot
        stops checkpoints from recycling the WAL.
        """
        if self._closed:
            raise LedgerClosed(f"ledger {self._path} is closed")
        query = _events_query(after, kinds, agent)
        if query is None:
            return iter(())
        return self._stream(*query)

    def records(self, after: int = 0, *, kinds: Iterable[str]) -> Iterator[tuple[int, Record]]:
        """``(id, record)`` of the events of ``kinds`` (catalogue kinds) after ``after``,
        decoded into their typed records (ledger/records.py); like ``events()``
        otherwise.  A row that does not fit its kind raises ``LedgerError``."""
        for event_id, _, record in self.timed_records(after, kinds=kinds):
            yield event_id, record

    def timed_records(self, after: int = 0, *, kinds: Iterable[str]) -> Iterator[tuple[int, float, Record]]:
        """Like ``records()``, with each event's wall-clock time: ``(id, ts, record)``."""
        for event in self.events(after, kinds=kinds):
            try:
                yield event.id, event.ts, decode(event.kind, event.agent, event.session, event.token, event.data)
            except KeyError:
                raise LedgerError(f"ledger {self._path}: event {event.id} has kind {event.kind!r}, which this Lockstep does not know") from None
            except msgspec.ValidationError as e:
                raise LedgerError(f"ledger {self._path}: event {event.id} ({event.kind}) cannot be read: {e}") from e

    def _stream(self, sql: str, params: list) -> Iterator[Event]:
        conn = _connect_readonly(self._path)
        try:
            try:
                cursor = conn.execute(sql, params)
                for row in cursor:
                    yield _event(row, self._path)
            except sqlite3.Error as e:
                raise LedgerError(f"reading ledger {self._path}: {e}") from e
        finally:
            conn.close()

    def tail(self, n: int = 20) -> list[Event]:
        """The last ``n`` events, oldest first."""
        if type(n) is not int:
            raise InvalidRecord(f"n must be an int, not {n!r}")
        if n <= 0:
            return []
        with self._locked() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM events ORDER BY id DESC LIMIT ?", (n,)
            ).fetchall()
        return [_event(row, self._path) for row in reversed(rows)]

    def count(self) -> int:
        """How many events the ledger holds."""
        with self._locked() as conn:
            return conn.execute("SELECT count(*) FROM events").fetchone()[0]

    def last_id(self) -> int:
        """Id of the newest event, 0 if there is none."""
        with self._locked() as conn:
            return conn.execute(_MAX_ID).fetchone()[0]

    def latest_snapshot(self) -> tuple[int, bytes] | None:
        """``(upto_event_id, blob)`` of the newest snapshot, or None."""
        if self._version < 2:
            return None
        with self._locked():
            rows = list(self._db["snapshots"].rows_where(order_by="upto DESC", limit=1))
        return (rows[0]["upto"], bytes(rows[0]["blob"])) if rows else None

    def get_meta(self, key: str) -> str | None:
        if type(key) is not str:
            raise InvalidRecord(f"meta key must be a str, not {key!r}")
        if self._version < 2:
            return None
        with self._locked():
            try:
                return self._db["meta"].get(key)["value"]
            except NotFoundError:
                return None

    def statistics(self) -> LedgerStatistics:
        return LedgerStatistics(
            path=str(self._path),
            schema_version=self._version,
            last_id=self.last_id(),
            events_appended=0,
            transactions=0,
            durable_transactions=0,
            checkpoints=0,
            db_size_bytes=_file_size(str(self._path)),
            wal_size_bytes=_file_size(f"{self._path}-wal"),
        )

    def close(self) -> None:
        """Close the connection; idempotent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()


def open_readonly(path: str | os.PathLike[str]) -> LedgerReader:
    """Open an existing ledger for reading only (CLIs: ``lockstep ledger tail``).

    Works while a coordinator writes to it and after it stopped or was killed.
    Never creates or modifies the file; raises ``LedgerMissing`` (a
    ``FileNotFoundError``) naming the path if there is no file,
    ``LedgerVersionError`` if the file is not a ledger or is too new.
    """
    path = Path(path)
    conn = _connect_readonly(path)
    try:
        version = user_version(conn)
        check_version(version, str(path))
        if version == 0:
            raise LedgerVersionError(f"{path} is not (yet) a Lockstep ledger: schema version 0")
    except sqlite3.Error as e:
        conn.close()
        raise LedgerError(f"cannot read ledger {path}: {e}") from e
    except BaseException:
        conn.close()
        raise
    return LedgerReader(path, conn, version)


# ---------------------------------------------------------------- writer


class Ledger(LedgerReader):
    """The coordinator's durable event log.  Create with ``Ledger.open(path)``."""

    def __init__(
        self,
        path: Path,
        conn: sqlite3.Connection,
        last_id: int,
        migrations_applied: tuple[int, ...],
        fsync_every_commit: bool = False,
    ) -> None:
        super().__init__(path, conn, SCHEMA_VERSION)
        self.fsync_every_commit = fsync_every_commit
        self._last_id = last_id
        self._migrations_applied = migrations_applied
        self._events_appended = 0
        self._transactions = 0
        self._durable_transactions = 0
        self._checkpoints = 0
        self._ckpt_lock = threading.Lock()
        self._ckpt_conn: sqlite3.Connection | None = None

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, fsync_every_commit: bool = False) -> Ledger:
        """Open (creating with mode 0600, or migrating) the ledger at ``path``.

        The parent directory must exist.  Sets WAL mode, ``synchronous=NORMAL`` (``FULL``
        with ``fsync_every_commit``), ``wal_autocheckpoint=0`` and a busy timeout on the
        write connection.
        """
        path = Path(path)
        if not path.parent.is_dir():
            raise LedgerError(f"cannot open ledger {path}: directory {path.parent} does not exist")
        try:
            os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE))
        except FileExistsError:
            pass
        except OSError as e:
            raise LedgerError(f"cannot create ledger {path}: {e}") from e
        try:
            conn = sqlite3.connect(
                path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as e:
            raise LedgerError(f"cannot open ledger {path}: {e}") from e
        try:
            if user_version(conn) == 0 and not conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # a new file: before WAL and the first table
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode.lower() != "wal":
                raise LedgerError(f"ledger {path}: could not enable WAL (journal_mode={mode})")
            conn.execute(f"PRAGMA synchronous={'FULL' if fsync_every_commit else 'NORMAL'}")
            conn.execute("PRAGMA wal_autocheckpoint=0")
            conn.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT:d}")
            applied = migrate(Database(conn, execute_plugins=False), str(path))
            last_id = conn.execute(_MAX_ID).fetchone()[0]
        except sqlite3.Error as e:
            conn.close()
            raise LedgerError(f"cannot open ledger {path}: {e}") from e
        except BaseException:
            conn.close()
            raise
        return cls(path, conn, last_id, applied, fsync_every_commit)

    @contextmanager
    def _write(self, durable: bool) -> Iterator[sqlite3.Connection]:
        """One write transaction on the locked write connection; FULL sync if durable."""
        durable = durable and not self.fsync_every_commit  # FULL already
        with self._locked() as conn:
            if durable:
                conn.execute("PRAGMA synchronous=FULL")  # not allowed inside a transaction
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            finally:
                if durable:
                    conn.execute("PRAGMA synchronous=NORMAL")
            self._transactions += 1
            self._durable_transactions += durable or self.fsync_every_commit

    def append(self, records: Sequence[Record], *, epoch: int, durable: bool = False) -> list[int]:
        """Append ``records`` in one transaction; return their new ids, in order.

        All records get the same ``ts`` (time of this call) and ``epoch``.  Raises
        ``InvalidRecord`` (nothing written) if any record cannot be stored, and
        ``LedgerError`` if SQLite fails (the transaction is rolled back).  With
        ``durable=True`` the commit is fsynced (``synchronous=FULL``) before return.
        """
        rows = _encode_batch(records, epoch)
        if not rows:
            return []
        with self._lock:
            return self._insert(rows, durable)

    def append_now(self, records: Sequence[Record], *, epoch: int) -> list[int] | None:
        """``append`` of a batch that is not fsynced, only if that needs no waiting:
        None (nothing written) when every commit is fsynced or the write lock is held
        (a compaction slice, a read, a checkpoint in a worker thread).

        For the coordinator's loop: such a commit only writes the WAL into the page
        cache, which costs less than handing it to a worker thread and back."""
        if self.fsync_every_commit or not self._lock.acquire(blocking=False):
            return None
        try:
            rows = _encode_batch(records, epoch)
            return self._insert(rows, False) if rows else []
        finally:
            self._lock.release()

    def _insert(self, rows: list[tuple], durable: bool) -> list[int]:
        """One transaction of ``rows``; the caller holds the write lock."""
        switch = durable and not self.fsync_every_commit  # FULL already otherwise
        # The hot path: written out instead of ``with self._write(...)`` (~15% faster
        # for one-record batches).  Ids come from the cached last id, not max(id):
        # with one writer they are the same; a second writer makes the insert hit
        # the primary key, which rolls back and is reported below.
        if self._closed:
            raise LedgerClosed(f"ledger {self._path} is closed")
        conn = self._conn
        first = self._last_id + 1
        ts = time.time()
        try:
            if switch:
                conn.execute("PRAGMA synchronous=FULL")  # not allowed inside a transaction
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.executemany(_INSERT, [(first + i, ts, *r) for i, r in enumerate(rows)])
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            finally:
                if switch:
                    conn.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.IntegrityError as e:
            self._last_id = conn.execute(_MAX_ID).fetchone()[0]
            raise LedgerError(
                f"append to ledger {self._path} failed: {e}; ids up to {self._last_id} "
                "were written by another connection (more than one writer?)"
            ) from e
        except sqlite3.Error as e:
            raise LedgerError(f"append to ledger {self._path} failed: {e}") from e
        self._last_id = last = first + len(rows) - 1
        self._events_appended += len(rows)
        self._transactions += 1
        self._durable_transactions += durable or self.fsync_every_commit
        return list(range(first, last + 1))

    def save_snapshot(self, upto_event_id: int, blob: bytes) -> None:
        """Store a registry snapshot covering events ``<= upto_event_id``.

        Replaces a snapshot with the same ``upto``; keeps the newest
        ``KEEP_SNAPSHOTS``.  ``upto_event_id`` must not exceed ``last_id()``.
        """
        if type(upto_event_id) is not int or upto_event_id < 0:
            raise InvalidRecord(f"upto_event_id must be a non-negative int, not {upto_event_id!r}")
        if not isinstance(blob, (bytes, bytearray, memoryview)):
            raise InvalidRecord(f"snapshot blob must be bytes, not {type(blob).__name__}")
        with self._write(False) as conn:
            last = self._last_id
            if upto_event_id > last:
                raise InvalidRecord(f"snapshot upto {upto_event_id} is past the last event {last}")
            self._db["snapshots"].insert(
                {"upto": upto_event_id, "ts": time.time(), "blob": bytes(blob)}, replace=True
            )
            conn.execute(
                "DELETE FROM snapshots WHERE upto NOT IN "
                "(SELECT upto FROM snapshots ORDER BY upto DESC LIMIT ?)",
                (KEEP_SNAPSHOTS,),
            )

    def compact(self, upto: int, before: float, *, slice_rows: int = COMPACT_SLICE) -> Iterator[int]:
        """Remove events a snapshot at ``upto`` covers and older than ``before`` (a
        wall-clock time), in slices of ``slice_rows`` (one short write transaction each,
        so appends from other threads wait at most one slice); yields each slice's count.
        ``remove_slice`` is one slice, for a caller that sizes and paces them itself.

        Kept whatever their age: events after ``upto`` (replay reads them), the newest
        event (ids are handed out from ``max(id)``: they must never go back), every plan
        event and plan ``job.started`` (unfinished plans resume from them), the landings'
        ``land.queued`` / ``land.landed`` / ``land.refused`` (the merge queue resumes from
        them and names who landed what), and the newest
        ``build`` probe result per target (the next build compares with its hash).  The
        caller must hold a snapshot at ``upto`` that restores everything else."""
        while (removed := self.remove_slice(upto, before, slice_rows)) > 0:
            yield removed

    def remove_slice(self, upto: int, before: float, rows: int) -> int:
        """One slice of ``compact``: at most ``rows`` events, one write transaction;
        returns how many were removed (0: nothing is left to remove)."""
        if type(upto) is not int or upto < 0:
            raise InvalidRecord(f"upto must be a non-negative int, not {upto!r}")
        with self._write(False) as conn:
            conn.execute(_ALLOW_REMOVAL, (str(upto),))  # the trigger lets ids below it go
            return conn.execute(_COMPACT_SLICE, {"upto": upto, "before": before, "rows": rows}).rowcount

    def first_ids(self, offset: int) -> int | None:
        """The id of the event ``offset`` places after the oldest (read on a private
        connection: never waits for, nor holds up, an append), or None past the end."""
        conn = _connect_readonly(self._path)
        try:
            row = conn.execute("SELECT id FROM events ORDER BY id LIMIT 1 OFFSET ?", (max(0, offset),)).fetchone()
        except sqlite3.Error as e:
            raise LedgerError(f"reading ledger {self._path}: {e}") from e
        finally:
            conn.close()
        return row[0] if row else None

    def first_id_at(self, ts: float) -> int:
        """The id of the oldest event appended at or after wall-clock time ``ts`` (one
        past the newest if none was), found by bisecting ids on a private read
        connection: ``ts`` follows ``id`` (both grow with each append), and ``ts`` has no
        index, so a query for it would read the whole table.  Bounds what ``compact``
        looks at when only old events go."""
        conn = _connect_readonly(self._path)
        try:
            low, high = conn.execute("SELECT coalesce(min(id), 1), coalesce(max(id), 0) + 1 FROM events").fetchone()
            while low < high:  # the answer is in [low, high]
                middle = (low + high) // 2
                row = conn.execute("SELECT id, ts FROM events WHERE id >= ? ORDER BY id LIMIT 1", (middle,)).fetchone()
                if row is None or row[1] >= ts:
                    high = middle
                else:
                    low = row[0] + 1
            return low
        except sqlite3.Error as e:
            raise LedgerError(f"reading ledger {self._path}: {e}") from e
        finally:
            conn.close()

    def count(self) -> int:
        """How many events the ledger holds, counted on a private read connection (a
        count of millions of rows takes a while: appends must not wait for it)."""
        if self._closed:
            raise LedgerClosed(f"ledger {self._path} is closed")
        conn = _connect_readonly(self._path)
        try:
            return conn.execute("SELECT count(*) FROM events").fetchone()[0]
        except sqlite3.Error as e:
            raise LedgerError(f"reading ledger {self._path}: {e}") from e
        finally:
            conn.close()

    def space(self) -> LedgerSpace:
        """The file's pages: how many, how many free, whether they can be returned."""
        with self._locked() as conn:
            return LedgerSpace(
                page_size=conn.execute("PRAGMA page_size").fetchone()[0],
                pages=conn.execute("PRAGMA page_count").fetchone()[0],
                free_pages=conn.execute("PRAGMA freelist_count").fetchone()[0],
                incremental=conn.execute("PRAGMA auto_vacuum").fetchone()[0] == AUTO_VACUUM_INCREMENTAL,
            )

    def vacuum_slice(self, pages: int) -> int:
        """Return up to ``pages`` free pages to the file system (``incremental_vacuum``,
        one write transaction); returns how many were freed, 0 when none are left or the
        ledger is not ``auto_vacuum=INCREMENTAL``.  In WAL mode the file shrinks when a
        checkpoint copies the last of these transactions into it."""
        if type(pages) is not int or pages <= 0:
            raise InvalidRecord(f"pages must be a positive int, not {pages!r}")
        with self._write(False) as conn:
            if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != AUTO_VACUUM_INCREMENTAL:
                return 0
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
            if free == 0:
                return 0
            conn.execute(f"PRAGMA incremental_vacuum({pages:d})").fetchall()
            return free - conn.execute("PRAGMA freelist_count").fetchone()[0]

    def convert_to_incremental(self) -> bool:
        """Make a ledger created before ``auto_vacuum=INCREMENTAL`` able to return space:
        a full VACUUM (rewrites the file; needs as much free disk again; holds the write
        lock throughout).  Returns False if it already was."""
        with self._locked() as conn:
            if conn.execute("PRAGMA auto_vacuum").fetchone()[0] == AUTO_VACUUM_INCREMENTAL:
                return False
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
            conn.execute("VACUUM")
            self._transactions += 1
            return True

    def set_meta(self, key: str, value: str, *, durable: bool = False) -> None:
        if type(key) is not str or type(value) is not str:
            raise InvalidRecord(f"meta key and value must be str, not {key!r}: {value!r}")
        with self._write(durable):
            self._db["meta"].upsert({"key": key, "value": value}, pk="key")

    def last_id(self) -> int:
        """Id of the newest event appended, 0 if there is none.  Never waits: it reads
        the writer's cached id without the write lock, so an event loop may call it while
        an append commits in a worker thread (the id of the last *committed* batch: the
        cache moves only after COMMIT).  Exact: one writer, rows are never deleted."""
        if self._closed:
            raise LedgerClosed(f"ledger {self._path} is closed")
        return self._last_id

    @property
    def transactions(self) -> int:
        """Write transactions committed so far (appends, compaction slices, meta): the
        WAL has new frames to checkpoint when this moved.  Never waits."""
        return self._transactions

    def checkpoint(self, *, truncate: bool = False, restart: bool = False) -> Checkpoint:
        """Run ``PRAGMA wal_checkpoint(PASSIVE)`` on a second connection.

        Meant for a worker thread while appends run in another: PASSIVE neither
        waits for nor blocks the writer.  Once every frame is checkpointed, the
        next append restarts the WAL from its beginning (so it stops growing).
        ``truncate=True`` runs TRUNCATE instead, for when the writer is idle: it
        waits for the writer and readers (``TRUNCATE_WAIT_MS``, then it reports
        ``busy``), holds new writers back while it copies, and leaves a WAL file of
        zero bytes.  ``restart=True`` runs RESTART: the same, except the file keeps its
        size (``journal_size_limit`` trims it), for a WAL that writes never let rest;
        run right after a PASSIVE one, it has only the last few frames to copy.
        """
        with self._ckpt_lock:
            if self._closed:
                raise LedgerClosed(f"ledger {self._path} is closed")
            try:
                if self._ckpt_conn is None:
                    self._ckpt_conn = sqlite3.connect(
                        self._path,
                        timeout=BUSY_TIMEOUT_S,
                        isolation_level=None,
                        check_same_thread=False,
                    )
                mode = "TRUNCATE" if truncate else "RESTART" if restart else "PASSIVE"
                if mode != "PASSIVE":  # it holds new writers back while it waits: wait briefly
                    self._ckpt_conn.execute(f"PRAGMA busy_timeout={TRUNCATE_WAIT_MS:d}")
                try:
                    busy, log, done = self._ckpt_conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
                finally:
                    if mode != "PASSIVE":
                        self._ckpt_conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000):d}")
            except sqlite3.Error as e:
                raise LedgerError(f"checkpoint of ledger {self._path} failed: {e}") from e
            self._checkpoints += 1
        return Checkpoint(busy=bool(busy), wal_frames=log, checkpointed_frames=done)

    def statistics(self) -> LedgerStatistics:
        """Counters of this object plus file sizes; never touches a connection."""
        return LedgerStatistics(
            path=str(self._path),
            schema_version=self._version,
            last_id=self._last_id,
            events_appended=self._events_appended,
            transactions=self._transactions,
            durable_transactions=self._durable_transactions,
            checkpoints=self._checkpoints,
            db_size_bytes=_file_size(str(self._path)),
            wal_size_bytes=_file_size(f"{self._path}-wal"),
            migrations_applied=self._migrations_applied,
            fsync_every_commit=self.fsync_every_commit,
        )

    def close(self) -> None:
        """Close both connections; idempotent.  The last close checkpoints the WAL."""
        with self._lock, self._ckpt_lock:
            if self._closed:
                return
            self._closed = True
            if self._ckpt_conn is not None:
                self._ckpt_conn.close()
            self._conn.close()
