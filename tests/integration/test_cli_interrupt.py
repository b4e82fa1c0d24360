"""Ctrl-C during a verb: exit 130 (the shell's 128 + SIGINT, as `run` exits) with one
short line, or the JSON error document under --json; never click's "Aborted!" (exit 1)
nor a traceback; and the coordinator keeps serving."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest

from .conftest import LOCKSTEP, end_process, env_for, holders

FAST = ("--heartbeat", "0.2", "--liveness", "3", "--lock-delay", "1")


def _interrupt_while_waiting(args: list[str], cwd) -> tuple[int, str, str]:
    """Start a claim that waits for a held file, and press Ctrl-C once it says it waits."""
    proc = subprocess.Popen([*LOCKSTEP, *args], cwd=cwd, env=env_for(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stderr.readline()  # "lockstep: waiting up to 60s for alice (src/app.py)"
        assert "waiting up to" in first, (first, proc.stderr.read() if proc.poll() is not None else "")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        return proc.returncode, out, first + err
    finally:
        end_process(proc)


@pytest.mark.parametrize(
    "args",
    [
        ["claim", "--agent", "bob", "--wait", "60", "src/app.py"],  # the fast path (no click)
        ["claim", "--agent=bob", "--wait=60", "src/app.py"],  # parsed by click
    ],
    ids=["fast-path", "click"],
)
def test_ctrl_c_exits_130_with_one_line(repo, coordinator, agents, args):
    coordinator(*FAST)
    alice = agents("alice", repo.root)
    assert alice.do("claim", paths=["src/app.py"]).get("token")
    rc, out, err = _interrupt_while_waiting(args, repo.root)
    assert rc == 130, (rc, out, err)
    assert out == ""
    assert err.splitlines()[1:] == ["lockstep: interrupted"], err  # no "Aborted!", no traceback
    assert holders(repo) == {"src/app.py": "alice"}  # the coordinator keeps serving


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "click"])
def test_ctrl_c_under_json_prints_the_error_document(repo, coordinator, agents, fast):
    coordinator(*FAST)
    alice = agents("alice", repo.root)
    assert alice.do("claim", paths=["src/app.py"]).get("token")
    wait = ["--wait", "60"] if fast else ["--wait=60"]
    rc, out, err = _interrupt_while_waiting(["claim", "--json", "--agent", "bob", *wait, "src/app.py"], repo.root)
    assert rc == 130, (rc, out, err)
    assert json.loads(out) == {"error": {"code": "interrupted", "message": "interrupted"}}
    assert "Traceback" not in err and "Aborted" not in err
