"""The hooks as a client runs them: ``lockstep hook install CLIENT --project`` writes the
client's settings file into a real worktree; each test reads that file back and runs
the exact command lines it registered (through the shell, as the clients do) for every
event the client sends, with the payloads in tests/fixtures/hooks, against a real
coordinator - strict and ``parallel-warn`` - and with no coordinator at all."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import cli, env_for, holders

FAST = ("--heartbeat", "0.2", "--liveness", "5", "--lock-delay", "1")
FIXTURES = Path(__file__).parents[1] / "fixtures" / "hooks"
SETTINGS = {"claude": ".claude/settings.json", "codex": ".codex/hooks.json", "gemini": ".gemini/settings.json"}
AGENTS = {"claude": "claude-3f2a9c1e7b44", "codex": "codex-0199a21381c0", "gemini": "gemini-b1e0c3a25d6f"}  # from the session ids
TOOL_EVENTS = {"PreToolUse", "PostToolUse", "BeforeTool", "AfterTool"}


# What each event's answer may hold (top-level keys; hookSpecificOutput's keys), as the
# clients document their output (Codex: codex-rs/hooks/schema/generated/*.command.output
# .schema.json, which refuse any other key; Claude Code: the hooks reference, "Decision
# control"; Gemini CLI: docs/hooks/reference.md).  None: no hookSpecificOutput.
COMMON = {"continue", "stopReason", "suppressOutput", "systemMessage"}
ANSWER_SHAPES = {
    "PreToolUse": (COMMON | {"hookSpecificOutput"}, {"hookEventName", "permissionDecision", "permissionDecisionReason", "additionalContext", "updatedInput"}),
    "PostToolUse": (COMMON | {"decision", "reason", "hookSpecificOutput"}, {"hookEventName", "additionalContext"}),
    "UserPromptSubmit": (COMMON | {"decision", "reason", "hookSpecificOutput"}, {"hookEventName", "additionalContext"}),
    "Stop": (COMMON | {"decision", "reason"}, None),
    "SubagentStop": (COMMON | {"decision", "reason"}, None),
    "BeforeTool": (COMMON | {"decision", "reason", "hookSpecificOutput"}, {"tool_input"}),
    "AfterTool": (COMMON | {"decision", "reason", "hookSpecificOutput"}, {"additionalContext", "tool_output"}),
    "BeforeAgent": (COMMON | {"decision", "reason", "hookSpecificOutput"}, {"additionalContext"}),
    "AfterAgent": (COMMON | {"decision", "reason", "hookSpecificOutput"}, {"clearContext"}),
}


def _shaped(event: str, answer: dict) -> dict:
    keys, specific = ANSWER_SHAPES[event]
    assert set(answer) <= keys, f"{event}: {sorted(set(answer) - keys)} is not in the client's output for it"
    if "hookSpecificOutput" in answer:
        assert specific is not None and set(answer["hookSpecificOutput"]) <= specific, (event, answer)
        assert answer["hookSpecificOutput"].get("hookEventName", event) == event
    return answer


def _env() -> dict:
    """The test environment, less any installed ``lockstep`` on PATH: the install then
    registers this interpreter running this checkout (``-m agents.cli``)."""
    env = env_for()
    env["PATH"] = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep) if d and not shutil.which("lockstep", path=d))
    return env


class Installed:
    """A client's hooks as its settings file registers them, run the way the client runs them."""

    def __init__(self, client: str, worktree: Path) -> None:
        self.client = client
        self.worktree = worktree
        settings = json.loads((worktree / SETTINGS[client]).read_text())
        self.groups: dict[str, list[dict]] = settings["hooks"]
        self.ran: set[str] = set()  # events whose installed command ran

    def commands(self, event: dict) -> list[str]:
        """The commands the client runs for ``event`` (a tool event's matcher is a regex on the tool)."""
        kind, tool = event["hook_event_name"], event.get("tool_name")
        found = []
        for group in self.groups.get(kind, []):
            matcher = group.get("matcher")
            if kind in TOOL_EVENTS and matcher and not re.fullmatch(matcher, tool or ""):
                continue
            found += [hook["command"] for hook in group["hooks"] if hook["type"] == "command"]
        return found

    def run(self, name: str, **changes) -> dict:
        """Run the installed command for the fixture ``name`` (its '/repo' moved to the
        worktree, ``changes`` applied); the answer as JSON ({} for no output)."""
        event = json.loads((FIXTURES / self.client / name).read_text().replace("/repo", str(self.worktree)))
        event.update(changes)
        commands = self.commands(event)
        assert len(commands) == 1, f"{name}: {len(commands)} installed commands for it"
        self.ran.add(event["hook_event_name"])
        done = subprocess.run(commands[0], shell=True, input=json.dumps(event), cwd=self.worktree, env=_env(),
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{name}: exit {done.returncode}: {done.stderr}"  # never 1; never 2 here
        return _shaped(event["hook_event_name"], json.loads(done.stdout) if done.stdout.strip() else {})

    def all_ran(self) -> None:
        assert self.ran == set(self.groups), f"installed but not exercised: {set(self.groups) - self.ran}"


def _install(client: str, worktree: Path, *flags: str) -> Installed:
    done = subprocess.run([sys.executable, "-m", "agents.cli", "hook", "install", client, "--project", *flags],
                          cwd=worktree, env=_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return Installed(client, worktree)


def _prepare(repo) -> None:
    """Files the fixtures name, committed, and a passing check suite for the turn end."""
    root = repo.root
    for name, text in {"src/main.py": "old\n", "src/held.py": "held\n", "src/util.py": "x = 1\n", "src/gone.py": "gone\n"}.items():
        (root / name).write_text(text)
    (root / "lockstep.toml").write_text(f'[checks.test]\ncmd = "{sys.executable} -c pass"\n')
    for args in (("add", "-A"), ("commit", "-qm", "files the payloads name")):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    subprocess.run(["git", "merge", "-q", "--ff-only", "main"], cwd=repo.other, check=True, capture_output=True)


def _ledger(repo, kind: str) -> list[dict]:
    out = cli("ledger", "tail", "-n", "500", "--kind", kind, "--json", cwd=repo.root).out
    return [json.loads(line) for line in out.splitlines()]


def _deny_reason(client: str, answer: dict) -> str:
    if client == "gemini":
        assert answer["decision"] == "deny", answer
        return answer["reason"]
    output = answer["hookSpecificOutput"]
    assert output["hookEventName"] == "PreToolUse" and output["permissionDecision"] == "deny", answer
    return output["permissionDecisionReason"]


def _warning(client: str, answer: dict, event: str) -> str:
    """A warning the client shows: ``systemMessage``, and the same text for the model
    where the event takes ``additionalContext``; never a decision."""
    assert "decision" not in answer, answer
    message = answer["systemMessage"]
    if client != "gemini" or event in ("AfterTool", "BeforeAgent"):
        context = answer["hookSpecificOutput"]
        assert context["additionalContext"] == message and "permissionDecision" not in context
        if client != "gemini":
            assert context["hookEventName"] == event
    return message


# ---------------------------------------------------------------------- Claude Code


def test_claude_code_events_through_the_installed_hooks(repo, coordinator):
    _prepare(repo)
    coordinator(*FAST)
    hooks = _install("claude", repo.other)
    me = AGENTS["claude"]
    assert cli("claim", "--literal", "app/[slug]/page.tsx", "src/held.py", "--agent", "alice", cwd=repo.root).rc == 0

    assert hooks.run("user_prompt_submit.json") == {}
    assert _ledger(repo, "turn.started")[-1]["agent"] == me
    # Write of a file named with glob characters that alice holds: denied, naming her
    assert "alice" in _deny_reason("claude", hooks.run("pre_tool_use_write.json"))
    # Edit of a free file: allowed and claimed
    assert hooks.run("pre_tool_use_edit.json") == {}
    assert holders(repo)["src/main.py"] == me
    # Bash: the command's target is read before (its own file: allowed), the worktree compared after
    assert hooks.run("pre_tool_use_bash.json") == {}
    subprocess.run("sed -i 's/old/new/' src/main.py", shell=True, cwd=repo.other, check=True)
    assert hooks.run("post_tool_use_bash.json") == {}
    # Bash writing alice's file by name: denied before it runs
    named = {"command": "echo x > src/held.py", "description": "Overwrite held.py"}
    assert "alice" in _deny_reason("claude", hooks.run("pre_tool_use_bash.json", tool_input=named))
    # a generator no parser can read writes it: reported after the call, the model told
    generator = {"command": "./generate.sh", "description": "Generate"}
    assert hooks.run("pre_tool_use_bash.json", tool_input=generator) == {}
    (repo.other / "src" / "held.py").write_text("generated\n")
    told = hooks.run("post_tool_use_bash.json", tool_input=generator)
    assert told["decision"] == "block" and "src/held.py" in told["reason"] and "alice" in told["reason"]
    assert told["hookSpecificOutput"] == {"hookEventName": "PostToolUse", "additionalContext": told["reason"]}
    assert [(e["agent"], e["data"]["paths"]) for e in _ledger(repo, "write.unannounced")] == [(me, ["src/held.py"])]
    # the model puts it back as told: git only restores, so it is not refused; nothing is left to report
    revert = {"command": "git checkout -- src/held.py", "description": "Put held.py back"}
    assert hooks.run("pre_tool_use_bash.json", tool_input=revert) == {}
    subprocess.run(revert["command"], shell=True, cwd=repo.other, check=True)
    assert hooks.run("post_tool_use_bash.json", tool_input=revert) == {}
    assert len(_ledger(repo, "write.unannounced")) == 1 and holders(repo)["src/held.py"] == "alice"
    # Write, then its check: the file on disk is what the tool was given
    page = {"file_path": str(repo.other / "docs" / "page.md"), "content": "a page\n"}
    assert hooks.run("pre_tool_use_write.json", tool_input=page) == {}
    (repo.other / "docs").mkdir()
    (repo.other / "docs" / "page.md").write_text("a page\n")
    assert hooks.run("post_tool_use_write.json", tool_input=page) == {}
    # the turn ends on content that passes verify
    assert hooks.run("stop.json") == {}
    assert _ledger(repo, "verify.finished")[-1]["data"]["passed"]
    assert hooks.run("subagent_stop.json") == {}
    assert "passed on this content" in _ledger(repo, "stop.decided")[-1]["data"]["reason"]
    hooks.all_ran()


def test_claude_code_warnings_in_warn_mode_reach_the_model(repo, coordinator):
    _prepare(repo)
    coordinator(*FAST, "--mode", "parallel-warn")
    hooks = _install("claude", repo.other)
    assert cli("claim", "src/main.py", "--agent", "alice", cwd=repo.root).rc == 0
    for name in ("pre_tool_use_edit.json", "pre_tool_use_bash.json"):
        assert "alice" in _warning("claude", hooks.run(name), "PreToolUse")
    subprocess.run("sed -i 's/old/new/' src/main.py", shell=True, cwd=repo.other, check=True)
    told = hooks.run("post_tool_use_bash.json")  # written after all: reported, the model told
    assert "src/main.py" in told["reason"] and "alice" in told["reason"]
    assert holders(repo)["src/main.py"] == "alice"


# ---------------------------------------------------------------------- Codex


def test_codex_events_through_the_installed_hooks(repo, coordinator):
    _prepare(repo)
    coordinator(*FAST)
    hooks = _install("codex", repo.other)
    me = AGENTS["codex"]
    assert cli("claim", "--literal", "app/[slug]/page.tsx", "--agent", "alice", cwd=repo.root).rc == 0

    assert hooks.run("user_prompt_submit.json") == {}
    assert _ledger(repo, "turn.started")[-1]["agent"] == me
    # the patch adds alice's file among others: the whole call is denied, nothing claimed
    assert "alice" in _deny_reason("codex", hooks.run("pre_tool_use_apply_patch.json"))
    assert "src/main.py" not in holders(repo)
    # a patch of free files: allowed, each claimed; applied; compared after
    patch = {"command": "*** Begin Patch\n*** Update File: src/util.py\n*** Move to: src/helpers.py\n@@\n-x = 1\n+x = 2\n"
                        "*** Delete File: src/gone.py\n*** End Patch\n"}
    assert hooks.run("pre_tool_use_apply_patch.json", tool_input=patch) == {}
    assert {holders(repo)[p] for p in ("src/util.py", "src/helpers.py", "src/gone.py")} == {me}
    (repo.other / "src" / "util.py").unlink()
    (repo.other / "src" / "helpers.py").write_text("x = 2\n")
    (repo.other / "src" / "gone.py").unlink()
    assert hooks.run("post_tool_use_apply_patch.json", tool_input=patch) == {}
    # Bash: `echo x > src/main.py`, free: allowed, claimed, run, compared
    assert hooks.run("pre_tool_use_bash.json") == {}
    assert holders(repo)["src/main.py"] == me
    subprocess.run("echo x > src/main.py", shell=True, cwd=repo.other, check=True)
    assert hooks.run("post_tool_use_bash.json") == {}
    # a command whose writes it cannot read writes alice's file: told after the call
    script = {"command": "python3 gen.py"}
    assert hooks.run("pre_tool_use_bash.json", tool_input=script) == {}
    (repo.other / "app" / "[slug]").mkdir(parents=True)
    (repo.other / "app" / "[slug]" / "page.tsx").write_text("generated\n")
    told = hooks.run("post_tool_use_bash.json", tool_input=script)
    assert told["decision"] == "block" and "app/[slug]/page.tsx" in told["reason"] and "alice" in told["reason"]
    assert [e["data"]["paths"] for e in _ledger(repo, "write.unannounced")] == [["app/\\[slug]/page.tsx"]]  # as a pattern
    shutil.rmtree(repo.other / "app")
    assert hooks.run("stop.json") == {}
    assert _ledger(repo, "verify.finished")[-1]["data"]["passed"]
    hooks.all_ran()


def test_codex_warnings_in_warn_mode_reach_the_model(repo, coordinator):
    _prepare(repo)
    coordinator(*FAST, "--mode", "parallel-warn")
    hooks = _install("codex", repo.other)
    assert cli("claim", "src/main.py", "--agent", "alice", cwd=repo.root).rc == 0
    assert "alice" in _warning("codex", hooks.run("pre_tool_use_bash.json"), "PreToolUse")
    assert "alice" in _warning("codex", hooks.run("pre_tool_use_apply_patch.json"), "PreToolUse")


# ---------------------------------------------------------------------- Gemini CLI


def test_gemini_cli_events_through_the_installed_hooks(repo, coordinator):
    _prepare(repo)
    coordinator(*FAST)
    hooks = _install("gemini", repo.other)
    me = AGENTS["gemini"]
    assert cli("claim", "src/held.py", "--agent", "alice", cwd=repo.root).rc == 0

    assert hooks.run("before_agent.json") == {}
    assert _ledger(repo, "turn.started")[-1]["agent"] == me
    held = {"file_path": str(repo.other / "src" / "held.py"), "old_string": "held", "new_string": "mine"}
    assert "alice" in _deny_reason("gemini", hooks.run("before_tool_replace.json", tool_input=held))
    assert hooks.run("before_tool_replace.json") == {}  # src/main.py: free, claimed
    assert holders(repo)["src/main.py"] == me
    assert hooks.run("before_tool_write_file.json") == {}
    (repo.other / "src" / "main.py").write_text("print('new')\n")
    assert hooks.run("after_tool_write_file.json") == {}
    # run_shell_command in src/: its own file, read before, compared after
    assert hooks.run("before_tool_shell.json") == {}
    subprocess.run("sed -i 's/new/newer/' main.py", shell=True, cwd=repo.other / "src", check=True)
    assert hooks.run("after_tool_shell.json") == {}
    # a formatter over src/ rewrites alice's file: told to the model beside the tool's output
    fmt = {"command": "npx prettier --write .", "description": "Format", "directory": "src"}
    assert hooks.run("before_tool_shell.json", tool_input=fmt) == {}
    (repo.other / "src" / "held.py").write_text("held  \n")
    told = hooks.run("after_tool_shell.json", tool_input=fmt)
    assert "decision" not in told and "src/held.py" in told["systemMessage"] and "alice" in told["hookSpecificOutput"]["additionalContext"]
    assert [e["data"]["paths"] for e in _ledger(repo, "write.unannounced")] == [["src/held.py"]]
    subprocess.run(["git", "checkout", "--", "src/held.py"], cwd=repo.other, check=True)
    assert hooks.run("after_agent.json") == {}
    assert _ledger(repo, "verify.finished")[-1]["data"]["passed"]
    hooks.all_ran()


def test_gemini_cli_warnings_in_warn_mode_are_shown(repo, coordinator):
    _prepare(repo)
    coordinator(*FAST, "--mode", "parallel-warn")
    hooks = _install("gemini", repo.other)
    assert cli("claim", "src/main.py", "--agent", "alice", cwd=repo.root).rc == 0
    for name in ("before_tool_replace.json", "before_tool_write_file.json", "before_tool_shell.json"):
        assert "alice" in _warning("gemini", hooks.run(name), "BeforeTool")


# ---------------------------------------------------------------------- no coordinator

# Every fixture of each client, in the order a turn sends them.
EVERY_EVENT = {
    "claude": ["user_prompt_submit.json", "pre_tool_use_write.json", "post_tool_use_write.json", "pre_tool_use_edit.json",
               "pre_tool_use_bash.json", "post_tool_use_bash.json", "stop.json", "subagent_stop.json"],
    "codex": ["user_prompt_submit.json", "pre_tool_use_apply_patch.json", "post_tool_use_apply_patch.json",
              "pre_tool_use_bash.json", "post_tool_use_bash.json", "stop.json"],
    "gemini": ["before_agent.json", "before_tool_write_file.json", "after_tool_write_file.json", "before_tool_replace.json",
               "before_tool_shell.json", "after_tool_shell.json", "after_agent.json"],
}
BEFORE = {"PreToolUse", "BeforeTool"}
AFTER = {"PostToolUse", "AfterTool"}
TURN_STARTS = {"UserPromptSubmit", "BeforeAgent"}


@pytest.mark.parametrize("client", ["claude", "codex", "gemini"])
def test_with_no_coordinator_every_event_is_answered_visibly_and_never_exits_1(repo, client):
    hooks = _install(client, repo.other)
    for name in EVERY_EVENT[client]:
        event = json.loads((FIXTURES / client / name).read_text())["hook_event_name"]
        answer = hooks.run(name)
        if event in BEFORE:  # the call goes on, with the warning
            assert "not coordinated" in _warning(client, answer, event), name
        elif event in AFTER:  # nothing kept before (the intent failed), or a write check that could not run
            assert answer == {} or "not coordinated" in _warning(client, answer, event), name
        elif event in TURN_STARTS:  # a prompt is never refused
            assert "not tracked" in _warning(client, answer, event), name
        else:  # a turn's end: it ends, said
            assert "decision" not in answer and "unverified" in answer["systemMessage"], name
    hooks.all_ran()


@pytest.mark.parametrize("client", ["claude", "codex", "gemini"])
def test_with_no_coordinator_and_fail_closed_every_write_is_denied(repo, client):
    command = f'"{sys.executable}" -m agents.cli hook {client} --fail-closed'
    hooks = _install(client, repo.other, "--command", command)
    assert {hook["command"] for groups in hooks.groups.values() for g in groups for hook in g["hooks"]} == {command}
    for name in EVERY_EVENT[client]:
        raw = json.loads((FIXTURES / client / name).read_text())
        event, looping = raw["hook_event_name"], raw.get("stop_hook_active") is True
        answer = hooks.run(name)
        if event in BEFORE:
            assert "--fail-closed" in _deny_reason(client, answer), name
        elif event in AFTER:  # the call already ran: never refused after the fact
            assert answer == {} or "not coordinated" in _warning(client, answer, event), name
        elif event in TURN_STARTS:
            assert "not tracked" in _warning(client, answer, event), name
        elif looping:  # the client says the stop hook is looping: never trap the model
            assert "decision" not in answer and "unverified" in answer["systemMessage"], name
        else:
            assert answer["decision"] == ("deny" if client == "gemini" else "block") and "--fail-closed" in answer["reason"], name
    # input that is no event at all: denied too, exit 0
    done = subprocess.run(command, shell=True, input="not json", cwd=repo.other, env=_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--fail-closed" in _deny_reason(client, json.loads(done.stdout))
