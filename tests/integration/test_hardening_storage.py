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

