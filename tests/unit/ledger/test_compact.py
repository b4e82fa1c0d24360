"""Ledger.compact: what a snapshot covers and is old goes, in slices; the rest stays."""

from __future__ import annotations

import sqlite3
import time

import pytest

from ledger import Ledger
from ledger import records as rec


def _kinds(path) -> list[tuple[int, str]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT id, kind FROM events ORDER BY id").fetchall()
    finally:
        conn.close()


def test_compact_removes_covered_old_events_in_slices_and_keeps_what_readers_need(tmp_path):
    path = tmp_path / "ledger.db"
    with Ledger.open(path) as led:
        led.append([rec.JobStarted(job="1.1", kind="plan")], epoch=1)
        for i in range(25):
            led.append([rec.ClaimRefused(agent="a", patterns=[f"x{i}"], reason="held")], epoch=1)
        for target, digest in (("dist", "old"), ("dist", "new"), ("web", "only")):
            led.append([rec.ProbeResult(job="1.2", name="b", kind="build", target=target, verdict="pass", details={"hash": digest})], epoch=1)
        upto = led.last_id()
        led.append([rec.Notice(message="after the snapshot")], epoch=1)
        slices = list(led.compact(upto, time.time() + 1, slice_rows=10))
        assert slices == [10, 10, 6]
        kept = [kind for _, kind in _kinds(path)]
        assert kept == ["job.started", "probe.result", "probe.result", "notice"]  # the plan, dist's newest hash, web's
        with pytest.raises(Exception):  # append-only again
            led._conn.execute("DELETE FROM events")
        assert led.append([rec.Notice(message="next")], epoch=1) == [upto + 2]  # ids never go back


def test_compact_keeps_young_events_and_the_newest(tmp_path):
    path = tmp_path / "ledger.db"
    with Ledger.open(path) as led:
        led.append([rec.Notice(message=str(i)) for i in range(5)], epoch=1)
        assert list(led.compact(led.last_id(), time.time() - 3600)) == []  # all younger than an hour
        assert sum(led.compact(led.last_id(), time.time() + 1)) == 4  # the newest always stays
        assert [i for i, _ in _kinds(path)] == [5]


def test_compact_keeps_what_the_merge_queue_resumes_from(tmp_path):
    path = tmp_path / "ledger.db"
    land = {"job": "1.3", "branch": "refs/heads/w1", "target": "main"}
    with Ledger.open(path) as led:
        led.append([rec.LandQueued(agent="w1", head="c" * 40, **land)], epoch=1)
        led.append([rec.LandPreflight(agent="w1", base="b" * 40, **land)], epoch=1)
        led.append([rec.LandLanded(agent="w1", commit="d" * 40, base="b" * 40, **land)], epoch=1)
        led.append([rec.Notice(message="newest")], epoch=1)
        list(led.compact(led.last_id(), time.time() + 1))
        assert [kind for _, kind in _kinds(path)] == ["land.queued", "land.landed", "notice"]


def _fill(led: Ledger, events: int) -> None:
    for start in range(0, events, 500):
        led.append([rec.Notice(message=f"{i:06d} " + "x" * 300) for i in range(start, start + 500)], epoch=1)


def test_only_events_below_the_removable_mark_can_be_deleted(tmp_path):
    path = tmp_path / "ledger.db"
    with Ledger.open(path) as led:
        led.append([rec.Notice(message=str(i)) for i in range(5)], epoch=1)
        assert led.remove_slice(3, time.time() + 1, rows=10) == 2  # ids 1 and 2
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            led._conn.execute("DELETE FROM events WHERE id = 3")  # the mark is 3: 3 stays
    assert [i for i, _ in _kinds(path)] == [3, 4, 5]


def test_compaction_then_incremental_vacuum_shrinks_the_file(tmp_path):
    path = tmp_path / "ledger.db"
    with Ledger.open(path) as led:
        assert led.space().incremental  # a new ledger can return space
        _fill(led, 6000)
        led.checkpoint(truncate=True)
        full = path.stat().st_size
        assert sum(led.compact(led.last_id(), time.time() + 1)) == 5999
        assert led.space().free_pages > 0 and path.stat().st_size == full  # free, not yet returned
        while led.vacuum_slice(100) > 0:
            pass
        assert led.space().free_pages == 0
        done = led.checkpoint(truncate=True)
        assert not done.busy and done.wal_frames == 0  # the WAL file is emptied
        assert path.stat().st_size < full / 10
        assert (tmp_path / "ledger.db-wal").stat().st_size == 0


def test_an_older_ledger_is_converted_once_to_return_space(tmp_path):
    path = tmp_path / "ledger.db"
    conn = sqlite3.connect(path)  # a ledger made before auto_vacuum: tables exist, mode NONE
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (x)")
    conn.close()
    path.unlink()
    with Ledger.open(path) as led:
        led._conn.execute("PRAGMA auto_vacuum=NONE")
        led._conn.execute("VACUUM")
        assert not led.space().incremental
        _fill(led, 1000)
        assert led.vacuum_slice(100) == 0  # nothing can be returned yet
        assert led.convert_to_incremental() is True
        assert led.space().incremental and led.convert_to_incremental() is False
        assert led.count() == 1000 and led.append([rec.Notice(message="next")], epoch=1) == [1001]


def test_the_first_event_at_a_time_is_found_by_bisecting_ids(tmp_path):
    path = tmp_path / "ledger.db"
    with Ledger.open(path) as led:
        assert led.first_id_at(time.time()) == 1  # empty: one past the newest
        stamps = []
        for i in range(40):
            led.append([rec.Notice(message=str(i))], epoch=1)
            stamps.append(led.tail(1)[0].ts)
        assert sum(led.compact(10, time.time() + 1)) == 9  # a gap at the start: ids 1-9 gone
        assert led.first_id_at(0) == 10
        for i in (12, 25, 40):
            assert led.first_id_at(stamps[i - 1]) <= i and stamps[led.first_id_at(stamps[i - 1]) - 1] == stamps[i - 1]
        assert led.first_id_at(time.time() + 60) == 41
