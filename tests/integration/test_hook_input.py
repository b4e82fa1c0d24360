"""Hostile and malformed input to the agent-CLI hooks (``lockstep hook claude|codex|gemini``)
with a real coordinator: every answer is the client's own JSON, exit 0 (2 only for
Claude Code's lost write), in the direction the README's hooks table gives for a
failure (allowed with a visible warning; denied under ``--fail-closed``); never a
traceback, never a hang; the coordinator goes on deciding."""

from __future__ import annotations

import json
import os
import subprocess
import threading

import pytest

from .conftest import LOCKSTEP, cli, end_process, env_for, holders

PRE = {"claude": "PreToolUse", "codex": "PreToolUse", "gemini": "BeforeTool"}
MiB = 1024 * 1024


def _hook(client: str, data: bytes, cwd, *flags: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*LOCKSTEP, "hook", client, *flags], input=data, cwd=cwd, env=env_for(env or {"LOCKSTEP_AGENT": "bob"}),
                          capture_output=True, timeout=60)


def _shown(done: subprocess.CompletedProcess) -> str:
    """The answer, checked to be one JSON document (or nothing: Claude Code's "go on")
    with exit 0 and no traceback."""
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done
    return json.dumps(json.loads(done.stdout)) if done.stdout.strip() else ""


def _denied(text: str) -> bool:
    return '"deny"' in text


def _write_event(client: str, repo_dir, path: str = "src/app.py") -> dict:
    tool, tool_input = {
        "claude": ("Write", {"file_path": str(repo_dir / path), "content": "x"}),
        "codex": ("apply_patch", {"command": f"*** Begin Patch\n*** Add File: {path}\n+x\n*** End Patch\n"}),
        "gemini": ("write_file", {"file_path": str(repo_dir / path), "content": "x"}),
    }[client]
    return {"hook_event_name": PRE[client], "session_id": "s1", "cwd": str(repo_dir), "tool_name": tool, "tool_input": tool_input}


def _read_both(proc: subprocess.Popen, timeout: float) -> tuple[bytes, bytes]:
    """The process's stdout and stderr to their end, within ``timeout``."""
    read: dict = {}
    readers = [threading.Thread(target=lambda n=name: read.__setitem__(n, getattr(proc, n).read()), daemon=True) for name in ("stdout", "stderr")]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(timeout)
    assert set(read) == {"stdout", "stderr"}, f"the hook did not answer in {timeout}s"
    return read["stdout"], read["stderr"]


@pytest.mark.parametrize("client", ["claude", "codex", "gemini"])
def test_an_input_past_the_cap_is_answered_unread_as_a_failure(repo, coordinator, client):
    """Stdin was read whole, however large (one 256 MiB event held three copies of
    itself): now the hook reads at most its cap, answers as for any failure, and
    stops reading (the writer sees the pipe closed)."""
    coordinator()
    for flags in ((), ("--fail-closed",)):
        proc = subprocess.Popen([*LOCKSTEP, "hook", client, *flags], cwd=repo.root, env=env_for({"LOCKSTEP_AGENT": "bob"}),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        stopped_reading = []

        def feed():
            try:
                proc.stdin.write(b'{"hook_event_name": "' + PRE[client].encode() + b'", "x": "')
                for _ in range(256):
                    proc.stdin.write(b"x" * MiB)
                proc.stdin.close()
            except BrokenPipeError:
                stopped_reading.append(True)

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        try:
            out, err = _read_both(proc, timeout=60)
            proc.wait(60)
            writer.join(60)
        finally:
            end_process(proc)
        assert proc.returncode == 0 and b"Traceback" not in err, err
        shown = json.dumps(json.loads(out))
        assert "larger than 32 MiB" in shown and _denied(shown) == bool(flags), shown
        assert stopped_reading, "the hook read the whole input"
    # the coordinator still decides the next, well-formed event
    _shown(_hook(client, json.dumps(_write_event(client, repo.root)).encode(), repo.root))
    assert holders(repo) == {"src/app.py": "bob"}


@pytest.mark.parametrize("client", ["claude", "codex", "gemini"])
def test_an_input_that_is_not_utf8_says_so(repo, client):
    data = b"\xff" + json.dumps(_write_event(client, repo.root)).encode()
    for flags in ((), ("--fail-closed",)):
        shown = _shown(_hook(client, data, repo.root, *flags))
        assert "not UTF-8" in shown and _denied(shown) == bool(flags), shown


def test_claude_code_events_of_the_wrong_shape_get_a_clear_failure_answer(repo, coordinator):
    """A tool_input, file_path or content of the wrong JSON type was "unexpected
    AttributeError: 'list' object has no attribute 'get'"; a Write's file_path given as
    an array exited 2 claiming the write was lost (the probe refused the array).  Now
    each names the field, in the failure's direction: allowed with the warning (a
    PostToolUse never refuses: the call ran), denied under --fail-closed."""
    coordinator()
    root = str(repo.root)
    pre = [
        ("Edit", [1], "tool_input is an array, not an object"),
        ("Write", "x", "tool_input is a string, not an object"),
        ("Edit", {"file_path": 5}, "tool_input.file_path is a number, not a path"),
        ("Write", {"file_path": ["a.txt"], "content": "x"}, "tool_input.file_path is an array, not a path"),
        ("NotebookEdit", {"notebook_path": True}, "tool_input.notebook_path is a boolean, not a path"),
    ]
    for tool, given, named in pre:
        event = {"hook_event_name": "PreToolUse", "session_id": "s1", "cwd": root, "tool_name": tool, "tool_input": given}
        for flags in ((), ("--fail-closed",)):
            shown = _shown(_hook("claude", json.dumps(event).encode(), repo.root, *flags))
            assert named in shown and "unexpected" not in shown and _denied(shown) == bool(flags), (tool, given, shown)
    post = [
        ({"file_path": ["src/app.py"], "content": "x"}, "tool_input.file_path is an array, not a path"),
        ({"file_path": "src/app.py", "content": 5}, "tool_input.content is a number, not text"),
        ({"file_path": "src/app.py", "content": "\ud800"}, "not valid Unicode"),
    ]
    for given, named in post:
        event = {"hook_event_name": "PostToolUse", "session_id": "s1", "cwd": root, "tool_name": "Write", "tool_input": given}
        for flags in ((), ("--fail-closed",)):
            shown = _shown(_hook("claude", json.dumps(event).encode(), repo.root, *flags))
            assert named in shown and "not coordinated" in shown and not _denied(shown), (given, shown)
    # a tool the hook does not look at is still nobody's business, whatever its input
    other = {"hook_event_name": "PreToolUse", "session_id": "s1", "cwd": root, "tool_name": "Read", "tool_input": [1]}
    assert _shown(_hook("claude", json.dumps(other).encode(), repo.root, "--fail-closed")) == ""
    assert holders(repo) == {}


@pytest.mark.parametrize("client", ["claude", "codex", "gemini"])
def test_a_cwd_that_is_no_folder_name_is_a_failure_answer_not_a_guess(repo, coordinator, client):
    """A cwd of 5 was a TypeError for Claude Code and, for Codex and Gemini CLI, the
    folder "5" (outside any repository: allowed in silence, even under --fail-closed)."""
    coordinator()
    for cwd, named in ((5, "cwd is a number, not a folder"), (["a"], "cwd is an array, not a folder"), (f"{repo.root}\0x", "cwd contains a NUL byte")):
        event = {**_write_event(client, repo.root), "cwd": cwd}
        for flags in ((), ("--fail-closed",)):
            shown = _shown(_hook(client, json.dumps(event).encode(), repo.root, *flags))
            assert named in shown and _denied(shown) == bool(flags), (cwd, flags, shown)
    assert holders(repo) == {}


@pytest.mark.parametrize("client", ["claude", "codex", "gemini"])
def test_a_session_id_with_letters_outside_ascii_still_names_a_valid_agent(repo, coordinator, client):
    """Without LOCKSTEP_AGENT the agent is the client's name and the session id's first
    letters and digits: "é" counted as one (str.isalnum), made an agent name the
    coordinator refuses, and every write of that session went uncoordinated."""
    coordinator()
    event = {**_write_event(client, repo.root, "docs/new.md"), "session_id": "séance-ü-42"}
    env = {k: v for k, v in env_for().items() if k != "LOCKSTEP_AGENT"}
    shown = _shown(subprocess.run([*LOCKSTEP, "hook", client], input=json.dumps(event).encode(), cwd=repo.root, env=env,
                                  capture_output=True, timeout=60))
    assert "invalid agent name" not in shown and "not coordinated" not in shown, shown
    assert holders(repo) == {"docs/new.md": f"{client}-sance42"}


@pytest.mark.parametrize("agent", ["..", "."])
def test_an_agent_named_dot_dot_keeps_its_before_state_inside_the_calls_folder(repo, coordinator, agent):
    """The "before" of a shell call is kept under .git/lockstep/calls/AGENT/, whose
    stale files (a day old) are swept: LOCKSTEP_AGENT=.. made that folder .git/lockstep
    itself, and a call writing nothing (``ls``) swept a day-old coordinator.json: no
    client found the running coordinator any more."""
    coordinator()
    record = repo.state_dir / "coordinator.json"
    two_days_ago = record.stat().st_mtime - 2 * 86400
    os.utime(record, (two_days_ago, two_days_ago))
    event = {"hook_event_name": "PreToolUse", "session_id": "s1", "cwd": str(repo.root), "tool_name": "Bash", "tool_input": {"command": "ls"}}
    _shown(_hook("claude", json.dumps(event).encode(), repo.root, env={"LOCKSTEP_AGENT": agent}))
    assert record.exists()
    assert sorted(p.name for p in repo.state_dir.glob("*.json")) == ["coordinator.json"]
    assert holders(repo) == {}  # the coordinator is still found, and answers


@pytest.mark.parametrize("client", ["claude", "codex", "gemini"])
def test_a_shell_call_writing_through_braces_asks_for_the_files_bash_names(repo, coordinator, client):
    """``touch src/{app,new}.py`` was asked for as one file named ``src/{app,new}.py``:
    the call went ahead over src/app.py, which alice held (only the after-call
    comparison told the model).  Now the files bash expands it to are asked for."""
    coordinator()
    assert cli("claim", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 0
    tool = {"claude": "Bash", "codex": "Bash", "gemini": "run_shell_command"}[client]
    event = {"hook_event_name": PRE[client], "session_id": "s1", "cwd": str(repo.other), "tool_name": tool,
             "tool_input": {"command": "touch src/{app,new}.py"}}
    shown = _shown(_hook(client, json.dumps(event).encode(), repo.other))
    assert _denied(shown) and "alice" in shown and "src/app.py" in shown, shown
    event["tool_input"]["command"] = "touch docs/{a,b}.md"
    assert not _denied(_shown(_hook(client, json.dumps(event).encode(), repo.other)))
    assert holders(repo) == {"src/app.py": "alice", "docs/a.md": "bob", "docs/b.md": "bob"}


def test_claude_code_events_are_routed_on_their_parsed_fields_not_on_their_spelling(repo, coordinator):
    """``hook claude`` chose the shell reading by looking for the text ``"Bash"``: a
    tool name written ``"B\\u0061sh"`` (the same JSON string) went to the file-tool
    path, which has no Bash, and the write over a held file was allowed in silence."""
    coordinator()
    assert cli("claim", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 0
    escaped = ('{"hook_event_name": "PreToolUse", "session_id": "s1", "cwd": "%s", "tool_name": "B\\u0061sh",'
               ' "tool_input": {"command": "echo x > src/app.py"}}' % repo.other)
    shown = _shown(_hook("claude", escaped.encode(), repo.other))
    assert _denied(shown) and "alice" in shown, shown


def test_a_write_outside_the_repository_is_not_read_back_by_the_coordinator(repo, coordinator, tmp_path):
    """Claude Code's PostToolUse on Write had the coordinator read the file back
    wherever it was (/etc/hostname, or through a symlink out of the worktree) and say
    its hash did not match: an oracle on any file the coordinator can read.  Outside
    the repository is nobody's business after the write as before it: silence."""
    coordinator()
    secret = tmp_path / "secret.txt"
    secret.write_text("the coordinator's own file\n")
    (repo.root / "out").symlink_to(tmp_path)
    for path in (str(secret), "out/secret.txt"):
        event = {"hook_event_name": "PostToolUse", "session_id": "s1", "cwd": str(repo.root), "tool_name": "Write",
                 "tool_input": {"file_path": path, "content": "a guess"}}
        done = _hook("claude", json.dumps(event).encode(), repo.root)
        assert done.returncode == 0 and done.stdout == b"" and done.stderr == b"", (path, done)
    # a file of the repository is still read back
    event["tool_input"] = {"file_path": "src/app.py", "content": "a guess"}
    lost = _hook("claude", json.dumps(event).encode(), repo.root)
    assert lost.returncode == 2 and b"write lost" in lost.stderr


def test_hook_install_over_a_settings_file_it_cannot_merge_exits_2_and_leaves_it(repo):
    settings = repo.root / ".claude" / "settings.json"
    settings.parent.mkdir()
    for data in (b'{"hooks": {"PreToolUse": {}}}', b"\xff\xfe{}", b'{"a": 1e400}'):
        settings.write_bytes(data)
        installed = cli("hook", "install", "claude", cwd=repo.root)
        assert installed.rc == 2 and len(installed.err.splitlines()) == 1 and "fix it by hand" in installed.err, installed
        assert settings.read_bytes() == data


@pytest.mark.parametrize("client", ["claude", "codex", "gemini"])
def test_a_shell_target_with_a_nul_byte_leaves_the_calls_other_files_asked_for(repo, coordinator, client):
    """``rm 'x<NUL>y'/*`` made the glob raise ValueError: the whole call was "unexpected
    ValueError: embedded null byte; this write is not coordinated" (denied under
    --fail-closed).  That target names no file; the call's other files are asked for."""
    coordinator()
    tool = {"claude": "Bash", "codex": "Bash", "gemini": "run_shell_command"}[client]
    event = {"hook_event_name": PRE[client], "session_id": "s1", "cwd": str(repo.root), "tool_name": tool,
             "tool_input": {"command": "rm 'x\0y'/* && touch docs/ok.md"}}
    shown = _shown(_hook(client, json.dumps(event).encode(), repo.root, "--fail-closed"))
    assert not _denied(shown) and "unexpected" not in shown, shown
    assert holders(repo) == {"docs/ok.md": "bob"}
