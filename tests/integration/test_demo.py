"""`lockstep demo` is the first thing a new user runs: it must work from a bare install."""

from __future__ import annotations

import json
import os
import subprocess

from .conftest import LOCKSTEP, env_for
from .test_cli_contract import check_document


def test_demo_tells_the_whole_story_and_cleans_up(tmp_path):
    proc = subprocess.run([*LOCKSTEP, "demo"], cwd=tmp_path, env=env_for(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for needle in ("refused", "block", "auto-claimed", "SIGKILL", "released", "old token", "The ledger"):
        assert needle in out, needle
    assert "✗" not in out
    assert "alice   gone" in out
    demo_dir = out.split("throwaway repository in ")[1].split(")")[0]
    assert not os.path.exists(demo_dir)


def test_demo_json_summarises_the_story(tmp_path):
    proc = subprocess.run([*LOCKSTEP, "demo", "--json"], cwd=tmp_path, env=env_for(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    check_document("lockstep demo", proc.stdout)  # the JSON contract every verb keeps (test_cli_contract.py)
    assert summary["ok"] and {s["step"] for s in summary["steps"]} >= {"alice", "bob", "carol", "kill", "fence"}
    assert summary["ledger"]["claim.refused"] == 2 and "Lockstep demo" in proc.stderr
