"""Claude Code hooks and the git guard, against a real coordinator and real git."""

from __future__ import annotations

import hashlib
import json
import subprocess

from .conftest import LOCKSTEP, bare_origin, cli, env_for, status

FAST = ("--heartbeat", "0.2", "--liveness", "5", "--lock-delay", "1")


def _hook(event: dict, cwd, env: dict | None = None, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([*LOCKSTEP, "hook", "claude", *flags], input=json.dumps(event), cwd=cwd,
                          env=env_for(env), capture_output=True, text=True, timeout=30)


def _pre(path, cwd, session="abc123") -> dict:
    return {"hook_event_name": "PreToolUse", "session_id": session, "cwd": str(cwd), "tool_name": "Edit",
            "tool_input": {"file_path": str(path), "old_string": "a", "new_string": "b"}}


def test_pre_tool_use_denies_an_edit_of_a_held_file_and_claims_a_free_one(repo, coordinator):
    coordinator(*FAST)
    assert cli("claim", "src/", "--agent", "alice", cwd=repo.root).rc == 0
    denied = _hook(_pre(repo.other / "src" / "app.py", repo.other), repo.other, {"LOCKSTEP_AGENT": "bob"})
    assert denied.returncode == 0
    decision = json.loads(denied.stdout)["hookSpecificOutput"]
    assert decision["permissionDecision"] == "deny" and "alice" in decision["permissionDecisionReason"]
    allowed = _hook(_pre(repo.other / "docs" / "new.md", repo.other), repo.other)  # agent from the session id
    assert allowed.returncode == 0 and allowed.stdout == ""
    assert {c["pattern"]: c["holder"] for c in status(repo)["claims"]}["docs/new.md"] == "claude-abc123"
    outside = _hook(_pre("/etc/hosts", repo.other), repo.other)
    assert outside.returncode == 0 and outside.stdout == ""


def test_post_tool_use_catches_a_write_that_did_not_land(repo, coordinator):
    coordinator(*FAST)
    target = repo.root / "notes.txt"
    target.write_text("what is really on disk")
    event = {"hook_event_name": "PostToolUse", "session_id": "s1", "cwd": str(repo.root), "tool_name": "Write",
             "tool_input": {"file_path": str(target), "content": "what the agent believes it wrote"}}
    lost = _hook(event, repo.root)
    assert lost.returncode == 2 and "write lost" in lost.stderr
    event["tool_input"]["content"] = "what is really on disk"
    assert _hook(event, repo.root).returncode == 0
    assert hashlib.sha256(target.read_bytes()).hexdigest()


def test_hooks_fail_open_without_a_coordinator_unless_told_otherwise(repo):
    event = _pre(repo.root / "src" / "app.py", repo.root)
    open_ = _hook(event, repo.root)  # allowed, with a warning the user and the model see
    shown = json.loads(open_.stdout)
    assert open_.returncode == 0 and "not coordinated" in shown["systemMessage"]
    assert shown["hookSpecificOutput"] == {"hookEventName": "PreToolUse", "additionalContext": shown["systemMessage"]}
    closed = _hook(event, repo.root, None, "--fail-closed")
    assert closed.returncode == 0 and json.loads(closed.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"
    for flags, denied in (((), False), (("--fail-closed",), True)):  # input that is not an event: never exit 1
        bad = subprocess.run([*LOCKSTEP, "hook", "claude", *flags], input="not json", cwd=repo.root, env=env_for(),
                             capture_output=True, text=True, timeout=30)
        answer = json.loads(bad.stdout)
        assert bad.returncode == 0 and "not JSON" in json.dumps(answer)
        assert ("hookSpecificOutput" in answer and answer["hookSpecificOutput"]["permissionDecision"] == "deny") == denied


def _git(cwd, *args, env=None):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env_for(env))


def test_the_git_guard_refuses_commits_of_files_another_agent_holds_in_every_worktree(repo, coordinator):
    coordinator(*FAST)
    installed = cli("guard", "install", "--json", cwd=repo.other)
    assert installed.rc == 0 and all("/.git/hooks/" in p for p in installed.json["installed"])
    assert cli("claim", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 0
    (repo.other / "src" / "app.py").write_text("bob's change\n")
    _git(repo.other, "add", "src/app.py")
    as_bob = _git(repo.other, "commit", "-qm", "bob's change", env={"LOCKSTEP_AGENT": "bob"})
    assert as_bob.returncode != 0 and "alice" in as_bob.stderr
    as_person = _git(repo.other, "commit", "-qm", "a person's change")
    assert as_person.returncode != 0 and "held by alice" in as_person.stderr
    assert cli("release", "--all", "--agent", "alice", cwd=repo.root).rc == 0
    assert _git(repo.other, "commit", "-qm", "now it is free", env={"LOCKSTEP_AGENT": "bob"}).returncode == 0
    # committing as an agent wrote the file: it is bob's now
    assert {c["pattern"]: c["holder"] for c in status(repo)["claims"]}["src/app.py"] == "bob"


def test_the_git_guard_refuses_a_push_of_files_another_agent_holds(repo, coordinator, tmp_path):
    coordinator(*FAST)
    bare_origin(repo.root, tmp_path)
    assert cli("guard", "install", cwd=repo.root).rc == 0
    (repo.root / "src" / "app.py").write_text("changed\n")
    _git(repo.root, "commit", "-qam", "a change")  # nobody held it yet
    assert cli("claim", "src/", "--agent", "alice", cwd=repo.other).rc == 0
    refused = _git(repo.root, "push", "-q", "origin", "main", env={"LOCKSTEP_AGENT": "bob"})
    assert refused.returncode != 0 and "alice" in refused.stderr
    cli("release", "--all", "--agent", "alice", cwd=repo.other)
    assert _git(repo.root, "push", "-q", "origin", "main", env={"LOCKSTEP_AGENT": "bob"}).returncode == 0


def test_the_mcp_server_exposes_the_verbs_as_tools(repo, coordinator):
    coordinator(*FAST)
    assert cli("claim", "src/", "--agent", "alice", cwd=repo.root).rc == 0
    calls = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2024-11-05", "capabilities": {}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "claim", "arguments": {"paths": ["src/app.py"]}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "intent", "arguments": {"paths": ["docs/x.md"]}}},
        {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "nope", "arguments": {}}},
    ]
    proc = subprocess.run([*LOCKSTEP, "mcp", "--agent", "mcpbot"], input="\n".join(json.dumps(c) for c in calls) + "\n",
                          cwd=repo.other, env=env_for(), capture_output=True, text=True, timeout=60)
    replies = {r["id"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert set(replies) == {1, 2, 3, 4, 5}  # no answer to the notification
    assert replies[1]["result"]["serverInfo"]["name"] == "lockstep"
    assert {t["name"] for t in replies[2]["result"]["tools"]} >= {"claim", "release", "intent", "status", "verify", "done"}
    refused = replies[3]["result"]
    assert refused["isError"] and json.loads(refused["content"][0]["text"])["conflicts"][0]["holder"] == "alice"
    allowed = json.loads(replies[4]["result"]["content"][0]["text"])
    assert allowed["verdict"] == "allow" and not replies[4]["result"]["isError"]
    assert replies[5]["error"]["code"] == -32602


def test_an_mcp_servers_file_tools_are_asked_for_like_the_clients_own(repo, coordinator):
    coordinator(*FAST)
    assert cli("claim", "src/", "--agent", "alice", cwd=repo.root).rc == 0
    event = {"hook_event_name": "PreToolUse", "session_id": "m1", "cwd": str(repo.other), "tool_name": "mcp__filesystem__write_file",
             "tool_input": {"path": str(repo.other / "src" / "app.py"), "content": "x"}}
    denied = _hook(event, repo.other, {"LOCKSTEP_AGENT": "bob"})
    decision = json.loads(denied.stdout)["hookSpecificOutput"]
    assert denied.returncode == 0 and decision["permissionDecision"] == "deny" and "alice" in decision["permissionDecisionReason"]
    event["tool_name"], event["tool_input"] = "mcp__fs__move_file", {"source": str(repo.other / "docs" / "a.md"), "destination": str(repo.other / "docs" / "b.md")}
    allowed = _hook(event, repo.other, {"LOCKSTEP_AGENT": "bob"})
    assert allowed.returncode == 0 and allowed.stdout == ""
    assert {c["pattern"]: c["holder"] for c in status(repo)["claims"]} == {"src/": "alice", "docs/a.md": "bob", "docs/b.md": "bob"}


def test_hooks_outside_any_git_repository_say_nothing(tmp_path):
    """Hooks installed for the user (--user) run in every folder: outside a repository
    every write once warned "no coordinator is running" and every stop printed a git
    error. There is nothing to coordinate there: each event is answered with silence."""
    folder = tmp_path / "notes"
    folder.mkdir()
    events = {
        "claude": [("PreToolUse", "Write"), ("PostToolUse", "Write"), ("PreToolUse", "Bash"), ("UserPromptSubmit", None), ("Stop", None)],
        "codex": [("PreToolUse", "apply_patch"), ("PreToolUse", "Bash"), ("UserPromptSubmit", None), ("Stop", None)],
        "gemini": [("BeforeTool", "write_file"), ("BeforeTool", "run_shell_command"), ("BeforeAgent", None), ("AfterAgent", None)],
    }
    tool_inputs = {
        "Write": {"file_path": str(folder / "a.txt"), "content": "x"}, "write_file": {"file_path": str(folder / "a.txt"), "content": "x"},
        "Bash": {"command": "echo x > b.txt"}, "run_shell_command": {"command": "echo x > b.txt"},
        "apply_patch": {"command": "*** Begin Patch\n*** Add File: c.txt\n+x\n*** End Patch\n"},
    }
    for client, pairs in events.items():
        for event_name, tool in pairs:
            event = {"hook_event_name": event_name, "session_id": "s1", "cwd": str(folder), "stop_hook_active": False, "prompt": "hi"}
            if tool:
                event.update(tool_name=tool, tool_input=tool_inputs[tool])
            answer = subprocess.run([*LOCKSTEP, "hook", client], input=json.dumps(event), cwd=folder, env=env_for({"LOCKSTEP_AGENT": "alice"}),
                                    capture_output=True, text=True, timeout=30)
            assert answer.returncode == 0 and answer.stdout.strip() in ("", "{}") and answer.stderr == "", (client, event_name, tool, answer)


def test_a_write_into_another_agents_worktree_is_refused_by_every_hook(repo, coordinator):
    """Each agent works in its own worktree; a file named by its path in another worktree
    of the repository (an absolute path, or `../wt-x/...`) is that worktree's file: the
    write would land on the other branch.  Every client's pre-tool hook refuses it and
    names the same file in the agent's own worktree; the agent's own files are still
    asked for as usual."""
    coordinator(*FAST)
    foreign, own = repo.root / "src" / "app.py", repo.other / "src" / "app.py"
    relative_foreign = f"../{repo.root.name}/src/app.py"
    cases = {
        "claude": ("PreToolUse", [("Write", {"file_path": str(foreign), "content": "x"}), ("Bash", {"command": f"echo x > {relative_foreign}"})]),
        "codex": ("PreToolUse", [("apply_patch", {"command": f"*** Begin Patch\n*** Add File: {foreign}\n+x\n*** End Patch\n"})]),
        "gemini": ("BeforeTool", [("write_file", {"file_path": str(foreign), "content": "x"}), ("run_shell_command", {"command": f"touch {relative_foreign}"})]),
    }
    for client, (event_name, calls) in cases.items():
        for tool, tool_input in calls:
            event = {"hook_event_name": event_name, "session_id": "w1", "cwd": str(repo.other), "tool_name": tool, "tool_input": tool_input}
            done = subprocess.run([*LOCKSTEP, "hook", client], input=json.dumps(event), cwd=repo.other,
                                  env=env_for({"LOCKSTEP_AGENT": "bob"}), capture_output=True, text=True, timeout=30)
            assert done.returncode == 0, (client, tool, done.stderr)
            text = done.stdout
            assert ("deny" in text or "block" in text) and "another worktree" in text and str(own) in text, (client, tool, text)
    assert not [c for c in status(repo)["claims"] if c["holder"] == "bob"]  # nothing asked for on bob's behalf
    allowed = _hook(_pre(own, repo.other), repo.other, {"LOCKSTEP_AGENT": "bob"})
    assert allowed.returncode == 0 and allowed.stdout == ""
    assert [c["pattern"] for c in status(repo)["claims"] if c["holder"] == "bob"] == ["src/app.py"]
