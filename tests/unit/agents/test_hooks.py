"""The Claude Code hook's decisions, given the coordinator's answers (pure)."""

from __future__ import annotations

import hashlib
import json

import pytest

from agents import hooks


def _event(tool="Edit", **tool_input):
    return {"hook_event_name": "PreToolUse", "session_id": "S-1/x", "cwd": "/r", "tool_name": tool, "tool_input": tool_input}


def test_only_writing_tools_with_a_path_are_asked_about():
    asked = []
    decide = lambda agent, path: asked.append((agent, path)) or ("allow", "")  # noqa: E731
    assert hooks.pre_tool_use(_event("Read", file_path="/r/a"), decide).exit_code == 0
    assert hooks.pre_tool_use(_event("Edit"), decide).exit_code == 0
    hooks.pre_tool_use(_event("NotebookEdit", notebook_path="/r/n.ipynb"), decide)
    assert asked == [("claude-S1x", "/r/n.ipynb")]


def test_block_denies_with_the_reason_and_warn_passes_it_on():
    denied = hooks.pre_tool_use(_event(file_path="/r/a"), lambda a, p: ("block", "held by alice"))
    output = json.loads(denied.stdout)["hookSpecificOutput"]
    assert output == {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "lockstep: held by alice"}
    warned = hooks.pre_tool_use(_event(file_path="/r/a"), lambda a, p: ("warn", "alice holds it too"))
    shown = json.loads(warned.stdout)  # JSON Claude Code shows: the user and the model
    assert warned.exit_code == 0 and "permissionDecision" not in shown["hookSpecificOutput"]
    assert shown["systemMessage"] == shown["hookSpecificOutput"]["additionalContext"] == "lockstep: alice holds it too"
    assert shown["hookSpecificOutput"]["hookEventName"] == "PreToolUse"


def test_a_warning_and_waiting_messages_are_one_json_answer():
    both = hooks.pre_tool_use(_event(file_path="/r/a"), lambda a, p: ("warn", "alice holds it too", "lockstep: message 1 from bob: hi"))
    shown = json.loads(both.stdout)
    assert both.exit_code == 0 and both.stderr == ""
    assert shown["systemMessage"] == "lockstep: alice holds it too"
    assert shown["hookSpecificOutput"] == {
        "hookEventName": "PreToolUse", "additionalContext": "lockstep: alice holds it too\nlockstep: message 1 from bob: hi",
    }
    only = json.loads(hooks.pre_tool_use(_event(file_path="/r/a"), lambda a, p: ("allow", "", "lockstep: message 1 from bob: hi")).stdout)
    assert only == {"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": "lockstep: message 1 from bob: hi"}}
    assert hooks.pre_tool_use(_event(file_path="/r/a"), lambda a, p: ("allow", "", "")).stdout == ""


def _unreachable(*args):
    from agents.oneshot import CoordinatorUnreachable

    raise CoordinatorUnreachable("no coordinator answered")


def _bug(*args):
    raise KeyError("oops")


@pytest.mark.parametrize("failing", [_unreachable, _bug])
def test_every_failure_is_a_visible_warning_or_under_fail_closed_a_denial(failing):
    event = _event(file_path="/r/a")
    open_ = hooks.answer(event, failing, failing)
    shown = json.loads(open_.stdout)
    assert open_.exit_code == 0 and "not coordinated" in shown["hookSpecificOutput"]["additionalContext"]
    assert shown["systemMessage"] == shown["hookSpecificOutput"]["additionalContext"]
    closed = hooks.answer(event, failing, failing, fail_closed=True)
    assert closed.exit_code == 0 and json.loads(closed.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"
    after = {**_event("Write", file_path="/r/a", content="x"), "hook_event_name": "PostToolUse"}
    for flag in (False, True):  # the write happened: said, never refused
        said = hooks.answer(after, failing, failing, fail_closed=flag)
        assert said.exit_code == 0 and "not coordinated" in json.loads(said.stdout)["systemMessage"]


def test_the_agent_name_comes_from_the_environment_first(monkeypatch):
    monkeypatch.setenv("LOCKSTEP_AGENT", "runner")
    assert hooks.agent_for({"session_id": "x"}) == "runner"
    monkeypatch.delenv("LOCKSTEP_AGENT")
    assert hooks.agent_for({}) == "claude-anonymous"


def test_post_tool_use_checks_the_hash_of_what_write_was_given():
    seen = []
    event = {**_event("Write", file_path="/r/a", content="hello"), "hook_event_name": "PostToolUse"}
    ok = hooks.post_tool_use(event, lambda a, p, h: seen.append(h) or (True, ""))
    assert ok.exit_code == 0 and seen == [hashlib.sha256(b"hello").hexdigest()]
    lost = hooks.post_tool_use(event, lambda a, p, h: (False, "write lost"))
    assert lost.exit_code == 2 and "write lost" in lost.stderr
    assert hooks.post_tool_use({**event, "tool_name": "Edit"}, lambda *a: (False, "")).exit_code == 0


@pytest.mark.parametrize("text", ["", "[1]", "{}", "nope"])
def test_input_that_is_not_a_hook_event_is_refused(text):
    with pytest.raises(hooks.HookInputError):
        hooks.parse_event(text)


def test_a_write_to_gits_own_files_is_nobodys_business(tmp_path, monkeypatch):
    """An edit of .git/config (or a hook script in .git/hooks) asked the coordinator
    for '.git/config', claiming a file that is no content of the repository."""
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.setenv("LOCKSTEP_ENDPOINT", "tcp://127.0.0.1:9")  # nobody there: asking would fail
    for path in (".git/config", str(tmp_path / ".git" / "hooks" / "pre-commit")):
        verdict, reason, _ = hooks.write_intent("alice", path, str(tmp_path))
        assert verdict == "allow" and "git's own file" in reason, path
