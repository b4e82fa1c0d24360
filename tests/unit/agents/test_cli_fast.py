"""The entry point's fast path: plain command lines of `intent`, `claim`, `hook claude` and `status` are
run without click, and everything else goes to the click group unchanged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agents.cli import fast

PROJECT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "argv",
    [
        ["intent", "a.py"],
        ["intent", "a.py", "b/", "--json"],
        ["intent", "--agent", "bob", "a.py", "--token", "12", "--endpoint", "ipc:///x"],
        ["hook", "claude"],
        ["hook", "claude", "--fail-closed", "--json", "--endpoint", "tcp://127.0.0.1:5"],
        ["status"],
        ["status", "--json"],
        ["status", "--agent", "bob", "--path", "src/**", "--endpoint", "ipc:///x", "--json"],
        ["claim", "a.py"],
        ["claim", "a.py", "b/", "--shared", "--literal", "--json", "--ttl", "30m", "--wait", "2s", "--pid", "1", "--agent", "bob"],
    ],
)
def test_plain_command_lines_take_the_fast_path(argv):
    assert fast._fast(argv) is not None


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--help"],
        ["release", "a.py", "--json"],
        ["intent"],  # a missing PATH: click says so
        ["intent", "--help"],
        ["intent", "-h", "a.py"],
        ["intent", "a.py", "--token", "x"],  # click's "not a valid integer"
        ["intent", "a.py", "--token", "-1"],
        ["intent", "a.py", "--token=3"],
        ["intent", "a.py", "--agent"],  # a missing value
        ["intent", "a.py", "--agent", ""],
        ["intent", "a.py", "--agent", "a", "--agent", "b"],  # a repeat
        ["intent", "--", "-weird"],
        ["intent", "-"],
        ["intent", "a.py", "--nope"],
        ["hook", "claude", "extra"],
        ["hook", "claude", "--help"],
        ["hook", "codex"],
        ["hook", "claude", "--token", "1"],
        ["status", "extra"],  # click's "unexpected extra argument"
        ["status", "--agent"],
        ["status", "--json", "--json"],
        ["status", "--path=src"],
        ["status", "-h"],
        ["claim"],  # a missing PATH
        ["claim", "a.py", "--pid", "x"],  # click's "not a valid integer"
        ["claim", "a.py", "--pid", "-1"],
        ["claim", "a.py", "--ttl"],
        ["claim", "a.py", "--shared", "--shared"],
        ["claim", "--help"],
    ],
)
def test_anything_else_goes_to_click(argv):
    assert fast._fast(argv) is None


def test_the_agent_comes_from_the_flag_then_the_environment(monkeypatch):
    seen = {}
    monkeypatch.setattr(fast, "intent", lambda paths, token, agent, endpoint, as_json: seen.update(agent=agent))
    monkeypatch.setenv("LOCKSTEP_AGENT", "env-agent")
    fast._fast(["intent", "a.py"])()
    assert seen["agent"] == "env-agent"
    fast._fast(["intent", "a.py", "--agent", "flag-agent"])()
    assert seen["agent"] == "flag-agent"
    monkeypatch.setenv("LOCKSTEP_AGENT", "")  # empty counts as unset, as in click
    fast._fast(["intent", "a.py"])()
    assert seen["agent"] is None


def test_claim_takes_its_agent_from_the_flag_then_the_environment(monkeypatch):
    from agents.cli import claimverb

    seen = {}
    monkeypatch.setattr(claimverb, "claim", lambda *args, as_json: seen.update(args=args, as_json=as_json))
    monkeypatch.setenv("LOCKSTEP_AGENT", "env-agent")
    fast._fast(["claim", "a.py", "--pid", "12", "--wait", "2s"])()
    assert seen == {"args": (("a.py",), False, None, "2s", False, "env-agent", 12, None), "as_json": False}
    fast._fast(["claim", "a.py", "b/", "--agent", "flag-agent", "--shared", "--json"])()
    assert seen == {"args": (("a.py", "b/"), True, None, None, False, "flag-agent", None, None), "as_json": True}


def test_status_takes_no_agent_from_the_environment(monkeypatch):
    seen = {}
    monkeypatch.setattr(fast, "status", lambda agent, path, endpoint, as_json: seen.update(agent=agent, path=path, as_json=as_json))
    monkeypatch.setenv("LOCKSTEP_AGENT", "env-agent")  # the click command's --agent has no envvar either
    fast._fast(["status", "--json"])()
    assert seen == {"agent": None, "path": None, "as_json": True}
    fast._fast(["status", "--path", "src/", "--agent", "bob"])()
    assert seen == {"agent": "bob", "path": "src/", "as_json": False}


def test_the_hot_path_imports_no_click_and_no_event_loop():
    code = (
        "import sys, agents.cli, agents.cli.fast, agents.cli.statusview, agents.cli.claimverb, agents.oneshot, agents.hooks, agents.paths\n"
        "heavy = ('click', 'trio', 'rich', 'coordinator', 'tomllib', 'difflib', 'importlib.metadata', 'probes')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m == 'importlib.metadata'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=PROJECT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
