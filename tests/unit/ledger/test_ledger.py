"""Tests of ledger/: real SQLite files in tmp_path, a real subprocess for the crash test."""

from __future__ import annotations

import os
import select
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlite_utils import Database

from ledger import (
    KEEP_SNAPSHOTS,
    SCHEMA_VERSION,
    Event,
    InvalidRecord,
    Ledger,
    LedgerClosed,
    LedgerError,
    LedgerMissing,
    LedgerVersionError,
    _schema,
    open_readonly,
)
from ledger.records import HEADER
from ledger.records import Record as CatalogueRecord
from protocol.errors import LocalError, LockstepError

ROOT = Path(__file__).resolve().parents[3]

_SAMPLE_TYPES: dict[tuple, type] = {}


def Record(kind: str, agent=None, session=None, token=None, data=None) -> CatalogueRecord:
    """A record of any kind with any data keys: the store is indifferent to kinds (the
    catalogue is tested in test_records.py), so these tests make up their own."""
    data = data or {}
    key = (kind, tuple(data))
    cls = _SAMPLE_TYPES.get(key)
    if cls is None:
        fields = [(name, Any, None) for name in data]
        cls = _SAMPLE_TYPES[key] = msgspec.defstruct(
            "Sample", fields, bases=(CatalogueRecord,), namespace={"KIND": kind}, frozen=True, kw_only=True
        )
    return cls(agent=agent, session=session, token=token, **data)


@pytest.fixture
def led(tmp_path):
    ledger = Ledger.open(tmp_path / "ledger.db")
    yield ledger
    ledger.close()


@contextmanager
def raw(path) -> Iterator[sqlite3.Connection]:
    """A plain second connection, as a person with the sqlite3 CLI would have."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


def query(path, sql: str) -> list:
    with raw(path) as conn:
        return conn.execute(sql).fetchall()


def count(path) -> int:
    with open_readonly(path) as r:
        return sum(1 for _ in r.events())


# ---------------------------------------------------------------- append / read


def test_round_trip_ids_data_kinds_tail(led):
    t0 = time.time()
    ids1 = led.append(
        [
            Record("coordinator.started", data={"pid": 42}),
            Record("agent.joined", agent="a1", session="s1", data={"name": "ü ✓", "tags": ["x"]}),
        ],
        epoch=1,
    )
    ids2 = led.append(
        [Record("claim.granted", agent="a1", session="s1", token=7, data={"path": "src/x.py", "n": {"a": [1, 2.5, None, True]}})],
        epoch=2,
    )
    assert ids1 == [1, 2] and ids2 == [3] and led.last_id() == 3

    events = list(led.events())
    assert [e.id for e in events] == [1, 2, 3]
    assert all(isinstance(e, Event) for e in events)
    claim = events[2]
    assert (claim.kind, claim.agent, claim.session, claim.token, claim.epoch) == ("claim.granted", "a1", "s1", 7, 2)
    assert claim.data == {"path": "src/x.py", "n": {"a": [1, 2.5, None, True]}}
    assert events[1].data == {"name": "ü ✓", "tags": ["x"]} and events[0].agent is None
    assert events[0].ts == events[1].ts  # one batch, one timestamp
    assert t0 - 1 <= events[0].ts <= claim.ts <= time.time() + 1

    assert [e.id for e in led.events(after=1)] == [2, 3]
    assert [e.id for e in led.events(kinds=["claim.granted", "coordinator.started"])] == [1, 3]
    assert [e.id for e in led.events(after=1, kinds={"claim.granted"})] == [3]
    assert list(led.events(kinds=[])) == []
    assert [e.id for e in led.events(agent="a1")] == [2, 3]
    assert [e.id for e in led.events(kinds=["claim.granted"], agent="a1")] == [3]
    assert list(led.events(agent="nobody")) == []
    assert [e.id for e in led.tail(2)] == [2, 3]
    assert led.tail(100) == events and led.tail(0) == []

    # stored as compact JSON a person can query
    row = query(led.path, "select data, json_extract(data, '$.path') from events where id = 3")
    assert row == [('{"path":"src/x.py","n":{"a":[1,2.5,null,true]}}', "src/x.py")]


def test_ids_strictly_increase_across_reopen(tmp_path):
    path = tmp_path / "l.db"
    with Ledger.open(path) as led:
        first = led.append([Record("a")] * 5, epoch=1)
    with Ledger.open(path) as led:
        assert led.last_id() == 5
        second = led.append([Record("b")] * 3, epoch=2)
    assert first + second == list(range(1, 9))


def test_second_writer_is_detected_not_interleaved(tmp_path):
    path = tmp_path / "l.db"
    with Ledger.open(path) as first, Ledger.open(path) as second:
        first.append([Record("a")], epoch=1)
        with pytest.raises(LedgerError, match="more than one writer"):
            second.append([Record("b"), Record("c")], epoch=1)
        assert count(path) == 1  # the conflicting batch rolled back whole
        assert second.append([Record("b")], epoch=1) == [2]  # it re-read the last id


def test_events_iteration_sees_one_snapshot(led):
    led.append([Record("a")] * 3, epoch=1)
    it = led.events()
    assert next(it).id == 1
    led.append([Record("b")] * 3, epoch=1)  # committed while the iteration is open
    assert [e.id for e in it] == [2, 3]
    assert [e.id for e in led.events()] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize(
    "record, what",
    [
        (Record("x", data={"obj": object()}), "JSON"),
        (Record(""), "kind"),
        (Record("x", agent=3), "agent"),
        (Record("x", token="7"), "token"),
        (Record("x", token=2**63), "token"),
        ("not a record", "Record"),
    ],
)
def test_invalid_record_fails_whole_batch(led, record, what):
    led.append([Record("before")], epoch=1)
    with pytest.raises(InvalidRecord, match=what) as info:
        led.append([Record("ok"), Record("ok"), record], epoch=1)
    assert isinstance(info.value, LocalError) and isinstance(info.value, LockstepError)
    assert [e.kind for e in led.events()] == ["before"] and led.last_id() == 1


def test_one_append_is_one_transaction(led):
    with raw(led.path) as other:
        version = other.execute("PRAGMA data_version").fetchone()[0]
        ids = led.append([Record("batch", data={"i": i}) for i in range(50)], epoch=1)
        assert other.execute("PRAGMA data_version").fetchone()[0] != version  # seen as committed
        stats = led.statistics()
        assert (stats.events_appended, stats.transactions, stats.last_id) == (50, 1, 50)
        assert ids == list(range(1, 51))

        # A failure *inside* the transaction, after some rows were inserted, rolls all back.
        other.execute(
            "CREATE TRIGGER boom BEFORE INSERT ON events WHEN NEW.kind = 'boom' "
            "BEGIN SELECT RAISE(ABORT, 'boom refused'); END"
        )
        for durable in (False, True):
            with pytest.raises(LedgerError, match="boom refused"):
                led.append([Record("ok"), Record("ok"), Record("boom")], epoch=1, durable=durable)
            assert other.execute("select count(*), max(id) from events").fetchone() == (50, 50)
        assert led._conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # back to NORMAL
        other.execute("DROP TRIGGER boom")
    assert led.append([Record("after")], epoch=1) == [51]
    assert led.statistics().transactions == 2


def test_durable_append_restores_normal_sync(led):
    def synchronous() -> int:  # of the *write* connection; 1 = NORMAL, 2 = FULL
        return led._conn.execute("PRAGMA synchronous").fetchone()[0]

    assert synchronous() == 1
    assert led.append([Record("token.reserved", data={"upto": 1000})], epoch=1, durable=True) == [1]
    assert synchronous() == 1
    led.set_meta("epoch", "2", durable=True)
    assert synchronous() == 1 and led.get_meta("epoch") == "2"
    stats = led.statistics()
    assert (stats.transactions, stats.durable_transactions) == (2, 2)
    assert [e.data for e in led.events()] == [{"upto": 1000}]


def test_fsync_every_commit_keeps_full_sync_through_durable_commits(tmp_path):
    led = Ledger.open(tmp_path / "ledger.db", fsync_every_commit=True)
    try:
        def synchronous() -> int:  # of the *write* connection; 2 = FULL
            return led._conn.execute("PRAGMA synchronous").fetchone()[0]

        assert synchronous() == 2
        led.append([Record("a")], epoch=1)
        led.append([Record("token.reserved", data={"upto": 1000})], epoch=1, durable=True)
        led.set_meta("epoch", "2", durable=True)
        led.set_meta("note", "x")
        assert synchronous() == 2  # never dropped back to NORMAL
        stats = led.statistics()
        assert stats.fsync_every_commit and stats.transactions == stats.durable_transactions == 4
    finally:
        led.close()


def test_append_now_commits_only_without_waiting_or_fsync(tmp_path, led):
    """The coordinator's loop commits a batch that is not fsynced itself (``append_now``);
    whatever would make it wait (the write lock held by a worker thread, an fsync per
    commit) is answered None, with nothing written, and left to ``append`` in a thread."""
    assert led.append_now([Record("a"), Record("b")], epoch=3) == [1, 2]
    assert led.append_now([], epoch=3) == []
    with led._lock:  # e.g. a compaction slice in a worker thread
        assert led.append_now([Record("c")], epoch=3) is None
    assert led.append([Record("c")], epoch=3) == [3]
    assert [(e.kind, e.epoch) for e in led.events()] == [("a", 3), ("b", 3), ("c", 3)]
    stats = led.statistics()
    assert (stats.transactions, stats.durable_transactions) == (2, 0)
    with pytest.raises(InvalidRecord):
        led.append_now([Record("ok"), Record("bad", data={"x": object()})], epoch=3)
    assert led.statistics().last_id == 3
    fsynced = Ledger.open(tmp_path / "fsynced.db", fsync_every_commit=True)
    try:
        assert fsynced.append_now([Record("a")], epoch=1) is None
        assert fsynced.statistics().last_id == 0
    finally:
        fsynced.close()
    led.close()
    with pytest.raises(LedgerClosed):
        led.append_now([Record("late")], epoch=3)


def test_events_table_is_append_only(led):
    led.append([Record("a", data={"v": 1}), Record("b")], epoch=1)
    with raw(led.path) as other:
        for sql in ("UPDATE events SET kind = 'x' WHERE id = 1", "DELETE FROM events WHERE id = 2", "DELETE FROM events"):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                other.execute(sql)
    assert [(e.id, e.kind, e.data) for e in led.events()] == [(1, "a", {"v": 1}), (2, "b", {})]


def test_file_mode_and_closed(tmp_path):
    path = tmp_path / "l.db"
    led = Ledger.open(path)
    led.append([Record("a")], epoch=1)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(Path(f"{path}-wal").stat().st_mode) == 0o600
    led.close()
    led.close()  # idempotent
    with pytest.raises(LedgerClosed):
        led.append([Record("b")], epoch=1)
    with pytest.raises(LedgerClosed):
        led.events()
    with pytest.raises(LedgerError, match="does not exist"):
        Ledger.open(tmp_path / "no" / "such" / "dir.db")


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


# data keys are a record type's field names: identifiers, not the column names
_KEY = st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True).filter(lambda k: k not in HEADER and k != "KIND")


@pytest.fixture(scope="module")
def shared_ledger(tmp_path_factory):
    ledger = Ledger.open(tmp_path_factory.mktemp("hyp") / "ledger.db")
    yield ledger
    ledger.close()


@settings(max_examples=60, deadline=None)
@given(data=st.lists(st.dictionaries(_KEY, _json, max_size=5), min_size=1, max_size=5))
def test_data_round_trips(shared_ledger, data):
    ids = shared_ledger.append([Record("prop", data=d) for d in data], epoch=1)
    assert [e.data for e in shared_ledger.events(after=ids[0] - 1)] == data


# ---------------------------------------------------------------- crash safety

CHILD = r"""
import sys
import msgspec
from ledger import Ledger, Record
Tick = msgspec.defstruct("Tick", [("i", int)], bases=(Record,), namespace={"KIND": "tick"}, frozen=True, kw_only=True)
led = Ledger.open(sys.argv[1])
size = int(sys.argv[2])
n = 0
while True:
    n += 1
    ids = led.append([Tick(agent="child", token=n, i=i) for i in range(size)], epoch=1)
    print(ids[-1], flush=True)
"""


def read_lines(proc: subprocess.Popen, want: int, deadline: float) -> tuple[list[bytes], bytes]:
    """``want`` complete stdout lines of ``proc`` (failing at ``deadline``), and the rest read."""
    fd, buf, lines = proc.stdout.fileno(), b"", []
    while len(lines) < want:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            pytest.fail(f"child printed only {len(lines)} lines before the deadline")
        if not select.select([fd], [], [], remaining)[0]:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            pytest.fail(f"child exited early: {proc.stderr.read().decode(errors='replace')}")
        *complete, buf = (buf + chunk).split(b"\n")
        lines += complete
    return lines, buf


def test_survives_sigkill_of_writer(tmp_path):
    path, size = tmp_path / "crash.db", 7
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), str(size)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env,
    )
    try:
        lines, partial = read_lines(proc, 40, time.monotonic() + 15)
    finally:
        proc.kill()  # SIGKILL: no atexit, no close, likely mid-transaction
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    rest = partial + proc.stdout.read()  # lines printed before the kill landed count too
    proc.stdout.close(), proc.stderr.close()
    reported = [int(x) for x in lines + rest.split(b"\n")[:-1]]
    assert reported == sorted(reported) and reported[0] == size

    with open_readonly(path) as reader:  # read-only reader recovers the left-over WAL
        ids = [e.id for e in reader.events()]
    assert ids == list(range(1, len(ids) + 1))
    assert ids[-1] >= reported[-1]  # every reported commit is there
    assert len(ids) % size == 0  # and no batch is torn
    with Ledger.open(path) as led:
        events = list(led.events())
        assert [e.id for e in events] == ids
        assert all(e.token == 1 + (e.id - 1) // size and e.data == {"i": (e.id - 1) % size} for e in events)
        assert led.append([Record("restarted")], epoch=2) == [len(ids) + 1]


# ---------------------------------------------------------------- checkpoints


def test_checkpoint_from_other_thread_while_appending(led):
    errors: list[BaseException] = []
    checkpointing = threading.Event()  # the appends after the first overlap checkpoints, however the threads are scheduled

    def writer() -> None:
        try:
            for k in range(150):
                led.append([Record("w", data={"k": k, "pad": "x" * 200})] * 20, epoch=1)
                if k == 0:
                    checkpointing.wait(timeout=30)
        except BaseException as e:  # reported below
            errors.append(e)

    thread = threading.Thread(target=writer)
    thread.start()
    results = []
    while thread.is_alive():
        results.append(led.checkpoint())
        checkpointing.set()
    thread.join(timeout=30)
    assert not thread.is_alive() and not errors
    assert results and led.statistics().checkpoints == len(results)
    assert led.last_id() == 3000

    led.append([Record("big", data={"pad": "y" * 500})] * 500, epoch=1)  # many WAL frames
    full = led.checkpoint()
    assert not full.busy and full.wal_frames == full.checkpointed_frames > 50
    wal_size = led.statistics().wal_size_bytes
    led.append([Record("small")], epoch=1)  # restarts the WAL from its beginning
    after = led.checkpoint()
    assert after.wal_frames < 10
    assert led.statistics().wal_size_bytes <= wal_size
    assert count(led.path) == 3501


# ---------------------------------------------------------------- snapshots and meta


def test_snapshots_keep_newest_few(led):
    assert led.latest_snapshot() is None
    led.append([Record("e")] * 10, epoch=1)
    for upto in (2, 4, 6, 8, 10):
        led.save_snapshot(upto, f"state@{upto}".encode())
    assert led.latest_snapshot() == (10, b"state@10")
    kept = [r[0] for r in query(led.path, "select upto from snapshots order by upto")]
    assert kept == [2, 4, 6, 8, 10][-KEEP_SNAPSHOTS:]
    led.save_snapshot(10, bytearray(b"again"))  # same upto replaces
    assert led.latest_snapshot() == (10, b"again")
    with pytest.raises(InvalidRecord, match="past the last event"):
        led.save_snapshot(11, b"future")
    assert led.latest_snapshot() == (10, b"again")


def test_meta(led):
    assert led.get_meta("repo") is None
    led.set_meta("repo", "/src/x")
    led.set_meta("repo", "/src/y")
    assert led.get_meta("repo") == "/src/y"
    with pytest.raises(InvalidRecord):
        led.set_meta("n", 3)


# ---------------------------------------------------------------- read-only access


def test_open_readonly_missing_path(tmp_path):
    path = tmp_path / "absent.db"
    with pytest.raises(LedgerMissing) as info:
        open_readonly(path)
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, LockstepError)
    assert str(path) in str(info.value) and info.value.filename == str(path)
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_open_readonly_while_writer_open_and_after(tmp_path):
    path = tmp_path / "l.db"
    led = Ledger.open(path)
    led.append([Record("a", agent="x")], epoch=1)
    led.set_meta("k", "v")
    reader = open_readonly(path)
    assert [e.kind for e in reader.tail()] == ["a"] and reader.get_meta("k") == "v"
    led.append([Record("b")] * 2, epoch=1)
    led.save_snapshot(3, b"s")
    assert reader.last_id() == 3 and [e.id for e in reader.events(after=1)] == [2, 3]
    assert reader.latest_snapshot() == (3, b"s") and reader.statistics().last_id == 3
    assert not hasattr(reader, "append")
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader._conn.execute("INSERT INTO meta VALUES ('x', 'y')")
    led.close()
    assert [e.id for e in reader.tail(5)] == [1, 2, 3]  # writer gone
    reader.close()
    with open_readonly(path) as fresh:  # after a clean stop (WAL checkpointed away)
        assert [e.kind for e in fresh.events()] == ["a", "b", "b"]


def test_open_readonly_rejects_foreign_files(tmp_path):
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(LedgerVersionError, match="not \\(yet\\) a Lockstep ledger"):
        open_readonly(empty)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(LedgerError, match="junk.db"):
        open_readonly(junk)
    with pytest.raises(LedgerError, match="junk.db"):
        Ledger.open(junk)


# ---------------------------------------------------------------- migrations


def schema(path) -> list:
    return query(path, "select type, name, sql from sqlite_master order by name")


def test_migrations_run_forward_once(tmp_path):
    old = tmp_path / "v1.db"
    with raw(old) as conn:
        assert _schema.migrate(Database(conn), str(old), target=1) == (1,)
        conn.execute("INSERT INTO events (ts, epoch, kind, data) VALUES (1.5, 1, 'old.event', '{\"a\":1}')")
    with open_readonly(old) as r:  # readers cope with an old version
        assert r.latest_snapshot() is None and r.get_meta("x") is None
        assert [e.kind for e in r.events()] == ["old.event"]

    with Ledger.open(old) as led:
        assert led.statistics().migrations_applied == (2, 3)
        assert led.statistics().schema_version == SCHEMA_VERSION == 3
        assert [(e.id, e.ts, e.data) for e in led.events()] == [(1, 1.5, {"a": 1})]
        led.save_snapshot(1, b"snap")
        assert led.append([Record("new")], epoch=2) == [2]
    before = schema(old)
    with Ledger.open(old) as led:
        assert led.statistics().migrations_applied == ()
        assert led.latest_snapshot() == (1, b"snap") and led.last_id() == 2
    assert schema(old) == before
    assert query(old, "PRAGMA user_version") == [(SCHEMA_VERSION,)]

    with Ledger.open(tmp_path / "v0.db") as fresh:
        assert fresh.statistics().migrations_applied == (1, 2, 3)


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "future.db"
    Ledger.open(path).close()
    with raw(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(LedgerVersionError, match="newer"):
        Ledger.open(path)
    with pytest.raises(LedgerVersionError, match="newer"):
        open_readonly(path)


def test_last_id_does_not_wait_for_a_commit_in_progress(led):
    """The coordinator's event loop asks for ``last_id()`` (checkpoints, snapshots) while
    an append may be committing in a worker thread: it must not wait for that commit."""
    led.append([Record("a")], epoch=1)
    committing, release = threading.Event(), threading.Event()

    def slow_commit():
        with led._lock:  # what an append holds while it commits
            committing.set()
            release.wait(10)

    thread = threading.Thread(target=slow_commit)
    thread.start()
    try:
        assert committing.wait(5)
        answered = []
        reader = threading.Thread(target=lambda: answered.append(led.last_id()))
        reader.start()
        reader.join(2)
        assert answered == [1], "last_id() waited for the write lock"
    finally:
        release.set()
        thread.join(5)
    led.close()
    with pytest.raises(LedgerClosed):
        led.last_id()
