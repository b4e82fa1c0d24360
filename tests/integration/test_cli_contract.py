"""One machine-output contract, checked by running every verb: under --json each prints
exactly one JSON document on stdout (JSON lines for the streams), usage errors included;
no document carries protocol fields (``type``, ``req``); every field is documented in
docs/cli.md, in the verb's own section."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import sys
from pathlib import Path

import click
import pytest

from agents.cli.base import main

from .conftest import PROJECT, cli, wait_until

FAST = ("--heartbeat", "0.2", "--liveness", "3", "--lock-delay", "1")
DOCS = (PROJECT / "docs" / "cli.md").read_text()
STREAMS = {"lockstep ledger tail", "lockstep mcp"}  # JSON lines
CHECKED_ELSEWHERE = {"lockstep demo"}  # test_demo.py checks its document with check_document
PLAN = """
[plan]
name = "tiny"

[[step]]
id = "one"
run = "{py} -c pass"
"""


def _commands(group: click.Group, prefix: str = "lockstep"):
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from _commands(command, f"{prefix} {name}")
        else:
            yield f"{prefix} {name}"


def documented_fields(verb: str) -> set[str]:
    """The fields of the verb's section (``check build`` and its siblings share ``check``'s)."""
    match = re.search(rf"^## `{re.escape(verb)}`\n(.*?)(?=^## |\Z)", DOCS, re.S | re.M)
    if match is None and verb.startswith("lockstep check "):
        return documented_fields("lockstep check")
    assert match, f"docs/cli.md has no section for {verb}"
    return set(re.findall(r"^\| `([A-Za-z_]+)` \|", match.group(1), re.M))


def protocol_fields(value, where: str = "") -> list[str]:
    """Paths of ``type`` / ``req`` keys anywhere in a document."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("type", "req"):
                found.append(f"{where}.{key}")
            found += protocol_fields(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += protocol_fields(item, f"{where}[{i}]")
    return found


def check_document(verb: str, stdout: str) -> list:
    """The documents a verb printed, after checking the contract on each."""
    text = stdout.strip()
    assert text, f"{verb} --json printed nothing"
    documents = [json.loads(line) for line in text.splitlines()] if verb in STREAMS else [json.loads(text)]
    allowed = documented_fields(verb) | {"error"}
    for document in documents:
        if verb != "lockstep mcp":  # MCP's own envelope has content "type"s; its tool results are checked below
            assert not protocol_fields(document), (verb, protocol_fields(document))
        for item in document if isinstance(document, list) else [document]:
            assert isinstance(item, dict), (verb, item)
            assert set(item) <= allowed, (verb, "undocumented fields", set(item) - allowed)
            if "error" in item:
                assert documented_fields("error") >= set(item) and set(item["error"]) >= {"code", "message"}
    return documents


def test_every_verb_prints_one_documented_json_document(repo, tmp_path):
    (repo.root / "lockstep.toml").write_text(f'[checks.test]\ncmd = "{sys.executable} -c pass"\n')
    (repo.root / "PLAN.toml").write_text(PLAN.format(py=sys.executable))
    (repo.root / "build").mkdir()
    (repo.root / "build" / "app.bin").write_text("1")
    (repo.root / "HANDOFF.md").write_text("# handoff\n")
    digest = hashlib.sha256((repo.root / "src" / "app.py").read_bytes()).hexdigest()
    ran: dict[str, list] = {}
    import subprocess

    def run(verb: str, *args: str, rc: int | None = 0, stdin: str | None = None, cwd: Path = repo.root, timeout: float = 60):
        import subprocess

        from .conftest import LOCKSTEP, env_for

        proc = subprocess.run(
            [*LOCKSTEP, *verb.split()[1:], *args], cwd=cwd, env=env_for(), input=stdin, capture_output=True, text=True, timeout=timeout
        )
        if rc is not None:
            assert proc.returncode == rc, (verb, args, proc.returncode, proc.stdout, proc.stderr)
        ran.setdefault(verb, []).append(check_document(verb, proc.stdout))
        return ran[verb][-1]

    run("lockstep where", "--json")
    served = run("lockstep serve", "--detach", "--json", *FAST)[0]
    try:
        run("lockstep claim", "src/app.py", "--agent", "alice", "--json")
        run("lockstep claim", "src/app.py", "--agent", "bob", "--json", rc=1, cwd=repo.other)
        run("lockstep intent", "src/app.py", "--agent", "bob", "--json", rc=1, cwd=repo.other)
        run("lockstep intent", "src/app.py", "--agent", "alice", "--json")
        run("lockstep status", "--json")
        run("lockstep top", "--once", "--json")
        run("lockstep check command", "--agent", "alice", "--json", "--", sys.executable, "-c", "pass")
        run("lockstep check build", "build", "--json")
        run("lockstep check handoff", "HANDOFF.md", "--json", rc=1)
        run("lockstep check http", "http://127.0.0.1:9/", "--json", rc=1)
        run("lockstep check consistency", "src/app.py", "src/app.py", "--json")
        run("lockstep check bundle", "--max-size", "250KB", "--json")
        run("lockstep check processes", "--match", "no-such-process-anywhere", "--count", "1", "--json", rc=1)
        run("lockstep check write", "src/app.py", "--sha256", digest, "--json")
        run("lockstep verify", "--agent", "alice", "--json")
        done = run("lockstep done", "--agent", "alice", "--json")[0]
        assert done["subject"] == "done" and "type" not in done and "req" not in done  # item 13
        run("lockstep release", "src/app.py", "--agent", "alice", "--json")
        run("lockstep abandon", "no-such-branch", "--reason", "contract test", "--json", rc=2)
        (repo.other / "src" / "landed.py").write_text("x = 1\n")
        subprocess.run(["git", "add", "src/landed.py"], cwd=repo.other, check=True)
        subprocess.run(["git", "commit", "-qm", "landed"], cwd=repo.other, check=True)
        landing = run("lockstep land", "--agent", "bob", "--json", cwd=repo.other, rc=1)[0]  # the branch has no [checks]
        assert landing["verdict"] == "failed" and "no verify checks" in landing["reason"]
        run("lockstep tasks", "add", "write the notes", "--to", "alice", "--json")
        run("lockstep tasks", "take", "1", "--agent", "alice", "--json")
        run("lockstep tasks", "take", "1", "--agent", "bob", "--json", rc=1, cwd=repo.other)
        run("lockstep tasks", "done", "1", "--agent", "alice", "--json")
        run("lockstep tasks", "--all", "--json")
        run("lockstep send", "--to", "alice", "hello", "--json")
        run("lockstep inbox", "--agent", "alice", "--all", "--json")
        run("lockstep plan run", "PLAN.toml", "--json")
        run("lockstep plan status", "--json")
        run("lockstep plan stop", "tiny", "--json", rc=1)  # it has ended: no such running plan
        run("lockstep guard install", "--json")
        run("lockstep guard status", "--json")
        run("lockstep guard stashed", "--json")
        run("lockstep guard pre-commit", "--json")
        run("lockstep guard pre-push", "--json", "origin", "url", stdin="")
        event = {"hook_event_name": "PreToolUse", "tool_name": "Edit", "tool_input": {"file_path": "src/other.py"}, "cwd": str(repo.root)}
        run("lockstep hook claude", "--json", stdin=json.dumps(event))
        run("lockstep hook install", "claude", "--dry-run", "--json")
        shell = {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "echo x > src/new.py"}, "cwd": str(repo.root)}
        run("lockstep hook codex", "--json", stdin=json.dumps(shell))
        gemini = {"hook_event_name": "BeforeTool", "tool_name": "write_file", "tool_input": {"file_path": "src/g.py"}, "cwd": str(repo.root)}
        run("lockstep hook gemini", "--json", stdin=json.dumps(gemini))
        calls = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "intent", "arguments": {"paths": ["src/app.py"]}}},
        ]
        answers = run("lockstep mcp", "--agent", "carol", stdin="".join(json.dumps(c) + "\n" for c in calls))
        intent = json.loads(answers[1]["result"]["content"][0]["text"])
        assert intent["verdict"] == "allow" and not protocol_fields(intent)  # item 13: MCP intent had both
        run("lockstep run", "--agent", "runner", "--json", "--", str(repo.root / "no-such-command"), rc=127)
        run("lockstep keys list", "--json")
        run("lockstep keys revoke", "nobody", "--json", rc=2)
        run("lockstep invite", "dora", "--json", rc=2)  # no --curve: no remote agents
        run("lockstep join", "not-a-token", "--json", rc=2)
        run("lockstep worker", "--json", rc=2)  # not a joined clone
        run("lockstep ledger tail", "--json")
        run("lockstep ledger compact", "--keep", "0", "--json")
        run("lockstep report", "--html", str(tmp_path / "report.html"), "--json")
        run("lockstep stop", "--json")
    finally:
        if Path(repo.state_dir / "coordinator.json").exists():
            try:
                os.kill(served["pid"], signal.SIGTERM)
            except ProcessLookupError:
                pass
        wait_until(lambda: not (repo.state_dir / "coordinator.json").exists(), timeout=20, what="the coordinator to stop")
    every = set(_commands(main))
    assert every == set(ran) | CHECKED_ELSEWHERE, ("verbs not run by this test", every - set(ran))
    for verb in every:
        documented_fields(verb)


@pytest.mark.parametrize(
    "argv",
    [
        ["claim", "--json", "--agnt", "x", "f"],
        ["intent", "--json", "--token", "abc", "f"],
        ["serve", "--json", "--mode", "bogus"],
        ["ledger", "tail", "--json", "-n", "-5"],
        ["report", "--json"],
        ["--json", "no-such-verb"],
    ],
)
def test_usage_errors_under_json_are_one_error_document(repo, argv):
    result = cli(*argv, cwd=repo.root)
    assert result.rc == 2, result
    assert result.json["error"]["code"] == "usage" and result.json["error"]["message"]


def test_usage_errors_without_json_stay_text_on_stderr(repo):
    result = cli("claim", "--agnt", "x", "f", cwd=repo.root)
    assert result.rc == 2 and result.out == "" and "No such option" in result.err
