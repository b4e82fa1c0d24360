"""Messages that help: `claim --wait` says who it waits for; the demo says it deletes
its repository and suggests commands that run from where the user is."""

from __future__ import annotations

import os
import pty
import select
import shutil
import sqlite3
import subprocess
import sys
import time

from .conftest import LOCKSTEP, cli, end_process, env_for, wait_until

FAST = ("--heartbeat", "0.2", "--liveness", "3", "--lock-delay", "1")


def test_claim_wait_names_whom_it_waits_for(repo, coordinator):
    coordinator(*FAST)
    assert cli("claim", "--agent", "alice", "src/app.py", cwd=repo.root).rc == 0
    waited = cli("claim", "--agent", "bob", "--wait", "0.6", "--json", "src/app.py", cwd=repo.other)
    assert waited.rc == 1 and waited.json["granted"] is False
    assert waited.err.count("waiting up to") == 1 and "alice (src/app.py)" in waited.err


def _refusals(repo, agent: str) -> int:
    conn = sqlite3.connect(f"file:{repo.state_dir / 'ledger.db'}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT count(*) FROM events WHERE kind = 'claim.refused' AND agent = ?", (agent,)).fetchone()[0]
    finally:
        conn.close()


def test_claim_wait_records_one_refusal_for_the_whole_wait(repo, coordinator):
    coordinator(*FAST)
    assert cli("claim", "--agent", "alice", "src/app.py", cwd=repo.root).rc == 0
    waited = cli("claim", "--agent", "bob", "--wait", "1.5", "--json", "src/app.py", cwd=repo.other)
    assert waited.rc == 1 and waited.json["granted"] is False
    assert _refusals(repo, "bob") == 1  # it retried several times (every 0.2 s), one event
    # and a wait that ends granted: the first refusal, then the grant
    assert cli("claim", "--agent", "carol", "docs/x.md", cwd=repo.root).rc == 0
    dave = subprocess.Popen(
        [*LOCKSTEP, "claim", "--agent", "dave", "--wait", "60", "docs/x.md"], cwd=repo.other, env=env_for(),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: _refusals(repo, "dave") == 1, timeout=30, what="dave's first refusal")
        assert cli("release", "--agent", "carol", "docs/x.md", cwd=repo.root).rc == 0
        assert dave.wait(30) == 0
    finally:
        end_process(dave)
    assert _refusals(repo, "dave") == 1


def test_claim_wait_on_a_terminal_shows_a_spinner_with_the_time_left(repo, coordinator):
    coordinator(*FAST)
    assert cli("claim", "--agent", "alice", "src/app.py", cwd=repo.root).rc == 0
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*LOCKSTEP, "claim", "--agent", "bob", "--wait", "3", "src/app.py"],
        cwd=repo.other, env=env_for(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave,
    )
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # the process closed the terminal
                    break
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
        assert proc.wait(30) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        os.close(master)
    text = seen.decode(errors="replace")
    frames = [f for f in text.split("\r") if "left" in f]
    assert len(frames) > 3, text  # redrawn
    assert "waiting for alice (src/app.py)" in frames[0] and "s left" in frames[0]
    assert "waiting up to" not in text  # the pipe's line is not printed on a terminal
    assert text.endswith("\r\x1b[K")  # the line is cleared when the wait ends


def test_demo_says_it_deletes_its_repository_and_suggests_a_detached_serve(tmp_path):
    proc = subprocess.run([*LOCKSTEP, "demo"], cwd=tmp_path, env=env_for(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "(deleted the throwaway repository" in proc.stdout and "--keep" in proc.stdout
    nxt = proc.stdout.split("Next", 1)[1]
    assert "serve --detach" in nxt and "run --agent NAME" in nxt
    # run as a module here: a bare `lockstep` only when that is on PATH
    prog = "lockstep" if shutil.which("lockstep", path=env_for()["PATH"]) else f"{sys.executable} -m agents.cli"
    assert f"`{prog} serve --detach`" in nxt
