"""A ledger that cannot be written: the coordinator fails closed and recovers by itself.

Two real ways to make writes fail: lowering the running coordinator's RLIMIT_FSIZE
(``prlimit``, no root needed: every write past the limit fails with EFBIG, which SQLite
reports as an I/O error) and, as root, a real 3 MB tmpfs filled to the brim (SQLite's
"database or disk is full").  Either way: nothing is granted that the ledger does not
hold, every request is answered ``unavailable`` with the cause, ``status`` keeps
answering and shows the condition, and once writes work again the coordinator grants
again without a restart.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from contextlib import closing

import psutil
import pytest

from .conftest import LOCKSTEP, cli, end_process, env_for, make_repo, status, wait_until
from .test_hardening import STEADY, assert_ledger_intact_and_replayed


def _storage(repo) -> dict:
    return status(repo)["statistics"].get("storage", {})


def _fails_closed_and_recovers(repo, c, alice, break_writes, mend_writes) -> None:
    token = alice.do("claim", paths=["src/app.py"])["token"]
    break_writes()
    before = sorted((x["pattern"], x["holder"], x["token"]) for x in status(repo)["claims"])
    refused = cli("claim", "src/new.py", "--agent", "bob", "--json", cwd=repo.root)
    assert refused.rc == 1, refused
    error = refused.json["error"]
    assert error["code"] == "unavailable" and "ledger" in error["message"] and "until it can write" in error["message"]
    # nothing granted that the ledger does not hold; reads still answered
    assert sorted((x["pattern"], x["holder"], x["token"]) for x in status(repo)["claims"]) == before
    assert "until it can write" in _storage(repo)["error"]
    assert alice.do("claim", paths=["src/other.py"]).get("error") == "unavailable"
    human = cli("status", cwd=repo.root)
    assert human.rc == 0 and "ledger" in human.out + human.err
    top = cli("top", "--once", "--json", cwd=repo.root)  # the storage condition in top, too
    assert top.rc == 0 and top.json["storage"]["writable"] is False and "until it can write" in top.json["storage"]["error"]
    frame = cli("top", "--once", cwd=repo.root, env={"COLUMNS": "160"})
    assert frame.rc == 0 and "STORAGE: ledger" in frame.out
    assert c.proc.poll() is None
    mend_writes()
    wait_until(lambda: not _storage(repo).get("error"), timeout=30, what="the ledger to be writable again")
    granted = cli("claim", "src/new.py", "--agent", "bob", "--json", cwd=repo.root)
    assert granted.rc == 0 and granted.json["token"] > token
    assert cli("top", "--once", "--json", cwd=repo.root).json["storage"] == {"writable": True, "error": ""}
    decision = alice.do("intent", paths=["src/app.py"], token=token)
    assert decision["verdict"] == "allow", decision["reason"]
    assert_ledger_intact_and_replayed(repo, c)


def test_a_ledger_that_cannot_grow_fails_closed_and_recovers_by_itself(repo, coordinator, agents):
    c = coordinator(*STEADY)
    alice = agents("alice", repo.root)
    proc = psutil.Process(c.pid)
    soft, hard = proc.rlimit(psutil.RLIMIT_FSIZE)
    _fails_closed_and_recovers(
        repo,
        c,
        alice,
        break_writes=lambda: proc.rlimit(psutil.RLIMIT_FSIZE, (1024, hard)),
        mend_writes=lambda: proc.rlimit(psutil.RLIMIT_FSIZE, (soft, hard)),
    )


@pytest.fixture
def small_disk(tmp_path):
    """A real 3 MB filesystem (tmpfs), unmounted after the test."""
    if os.getuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(small)], check=True)
    yield small
    subprocess.run(["umount", "-l", str(small)], check=False)  # lazy: the other fixtures end the processes after


def test_a_full_disk_fails_closed_and_recovers_when_space_returns(small_disk, coordinator_in, agents):
    repo = make_repo(small_disk / "repo")
    c = coordinator_in(repo, *STEADY)
    alice = agents("alice", repo.root)
    filler = small_disk / "filler"

    def fill() -> None:
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        # the WAL may still have room in frames it already holds: use it up
        for i in range(2000):
            if cli("claim", f"fill/{i}.py", "--agent", "filler", cwd=repo.root).rc != 0:
                return
        raise AssertionError("the ledger never hit the full disk")

    _fails_closed_and_recovers(repo, c, alice, break_writes=fill, mend_writes=filler.unlink)
    conn = sqlite3.connect(f"file:{repo.state_dir / 'ledger.db'}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()


# ------------------------------------------------------------------ serve on a full disk


def _serve_limited(repo, fsize: int) -> subprocess.Popen:
    """``lockstep serve`` whose every write past ``fsize`` bytes of a file fails (EFBIG,
    an I/O error to SQLite), as on a disk with no room for the ledger to grow."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return subprocess.Popen(
        [*LOCKSTEP, "serve", *STEADY], cwd=repo.root, env=env_for(), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, preexec_fn=limit,
    )


def test_serve_where_the_ledger_cannot_be_written_exits_2_in_one_line_and_starts_once_it_can(repo, coordinator):
    c = coordinator(*STEADY)
    token = cli("claim", "src/app.py", "--agent", "alice", "--json", cwd=repo.root).json["token"]
    c.stop()  # a clean stop: opening the ledger again needs a new WAL index (32 KB)
    proc = _serve_limited(repo, 1024)
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        end_process(proc)
    assert proc.returncode == 2, err
    assert err.strip().splitlines() == [err.strip()] and "Traceback" not in err
    assert "ledger" in err and "I/O error" in err, err
    # room again: it starts as usual, with what the ledger held
    c = coordinator(*STEADY)
    assert [(x["pattern"], x["token"]) for x in status(repo)["claims"]] == [("src/app.py", token)]
    granted = cli("claim", "src/new.py", "--agent", "bob", "--json", cwd=repo.root)
    assert granted.rc == 0 and granted.json["token"] > token


def test_serve_on_a_full_disk_exits_2_in_one_line_and_starts_once_space_is_freed(small_disk, coordinator_in):
    repo = make_repo(small_disk / "repo")
    c = coordinator_in(repo, *STEADY)
    token = cli("claim", "src/app.py", "--agent", "alice", "--json", cwd=repo.root).json["token"]
    c.stop()
    filler = small_disk / "filler"
    with open(filler, "wb", buffering=0) as f:  # to the last byte
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    result = cli("serve", *STEADY, cwd=repo.root, timeout=30)
    assert result.rc == 2, result
    assert "Traceback" not in result.err and len(result.err.strip().splitlines()) == 1, result.err
    assert "No space left" in result.err or "disk full" in result.err or "full" in result.err, result.err
    filler.unlink()  # freeing space is enough: no bigger filesystem, no manual repair
    c = coordinator_in(repo, *STEADY)
    assert [(x["pattern"], x["token"]) for x in status(repo)["claims"]] == [("src/app.py", token)]
    granted = cli("claim", "src/new.py", "--agent", "bob", "--json", cwd=repo.root)
    assert granted.rc == 0 and granted.json["token"] > token
    c.stop()



def test_serve_on_a_ledger_with_a_row_written_by_hand_exits_2_naming_the_event_and_what_to_do(repo, coordinator):
    c = coordinator(*STEADY)
    assert cli("claim", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 0
    c.stop()
    ledger = repo.state_dir / "ledger.db"
    with closing(sqlite3.connect(ledger)) as conn:  # everything in the main file, to put back between the cases
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        event = conn.execute("SELECT max(id) FROM events").fetchone()[0] + 1
    pristine = ledger.read_bytes()

    def put_back() -> None:
        for suffix in ("-wal", "-shm"):
            ledger.with_name(ledger.name + suffix).unlink(missing_ok=True)
        ledger.write_bytes(pristine)
    rows = [  # data nested past any decoder's depth (no reader can show it); a claim no client could have been granted
        ("[" * 100_000 + "]" * 100_000, "(claim.granted) has data that is not a JSON object", False),
        ('{"patterns": ["/etc/passwd"], "access": "exclusive"}', "(claim.granted) cannot be replayed: path '/etc/passwd' is absolute", True),
    ]
    for data, said, readable in rows:
        put_back()
        with closing(sqlite3.connect(ledger)) as conn, conn:
            conn.execute("INSERT INTO events (ts, epoch, kind, agent, session, data) VALUES (0, 1, 'claim.granted', 'bob', '1.1', ?)", (data,))
        served = cli("serve", cwd=repo.root, timeout=30)
        assert served.rc == 2, served
        assert served.err.strip().splitlines() == [served.err.strip()] and "Traceback" not in served.err
        assert said in served.err and f"event {event} " in served.err and "aside" in served.err, served.err
        tail = cli("ledger", "tail", "-n", "3", cwd=repo.root)  # the row as it is, or in one line why not
        assert (tail.rc == 0 and "/etc/passwd" in tail.out) if readable else (tail.rc != 0 and said in tail.err and "Traceback" not in tail.err)
    put_back()
    coordinator(*STEADY)  # the ledger as Lockstep wrote it serves again, with its claim
    assert [x["pattern"] for x in status(repo)["claims"]] == ["src/app.py"]
