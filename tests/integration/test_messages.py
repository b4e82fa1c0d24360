"""Messages that help: `claim --wait` says who it waits for; the demo says it deletes
its repository and suggests commands that run from where the user is."""

from __future__ import annotations

import shutil
import subprocess
import sys

from .conftest import LOCKSTEP, cli, env_for

FAST = ("--heartbeat", "0.2", "--liveness", "3", "--lock-delay", "1")


def test_claim_wait_names_whom_it_waits_for(repo, coordinator):
    coordinator(*FAST)
    assert cli("claim", "--agent", "alice", "src/app.py", cwd=repo.root).rc == 0
    waited = cli("claim", "--agent", "bob", "--wait", "0.6", "--json", "src/app.py", cwd=repo.other)
    assert waited.rc == 1 and waited.json["granted"] is False
    assert waited.err.count("waiting up to") == 1 and "alice (src/app.py)" in waited.err


def test_demo_says_it_deletes_its_repository_and_suggests_a_detached_serve(tmp_path):
    proc = subprocess.run([*LOCKSTEP, "demo"], cwd=tmp_path, env=env_for(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "(deleted the throwaway repository" in proc.stdout and "--keep" in proc.stdout
    nxt = proc.stdout.split("Next", 1)[1]
    assert "serve --detach" in nxt and "run --agent NAME" in nxt
    # run as a module here: a bare `lockstep` only when that is on PATH
    prog = "lockstep" if shutil.which("lockstep", path=env_for()["PATH"]) else f"{sys.executable} -m agents.cli"
    assert f"`{prog} serve --detach`" in nxt
