"""The turn-end gate and done keyed on content, against a real coordinator, a real git
worktree, a real check suite that fails then passes, and the clients' own payloads
(tests/fixtures/hooks)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .conftest import LOCKSTEP, cli, env_for

FAST = ("--heartbeat", "0.2", "--liveness", "5", "--lock-delay", "1")
FIXTURES = Path(__file__).parents[1] / "fixtures" / "hooks"
CLAUDE_AGENT = "claude-3f2a9c1e7b44"  # from the fixtures' session_id


def _fixture(client: str, name: str, cwd: Path, **changes) -> dict:
    """A recorded payload with its '/repo' paths moved into a real worktree."""
    event = json.loads((FIXTURES / client / name).read_text().replace("/repo", str(cwd)))
    event.update(changes)
    return event


def _hook(client: str, event: dict, cwd: Path, *flags: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*LOCKSTEP, "hook", client, *flags], input=json.dumps(event), cwd=cwd,
                          env=env_for(env), capture_output=True, text=True, timeout=120)


def _answer(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stderr  # a hook never exits 1
    return json.loads(done.stdout or "{}")


def _suite(root: Path, *, fail: bool, max_loops: int = 2, turn_gate: bool = True) -> None:
    test = "import sys; print('E   AssertionError: 1 != 2'); sys.exit(1)" if fail else "pass"
    (root / "lockstep.toml").write_text(
        f'[verify]\nmax_repair_loops = {max_loops}\nturn_gate = {"true" if turn_gate else "false"}\n\n'
        f'[checks.lint]\ncmd = "{sys.executable} -c pass"\n\n'
        f'[checks.test]\ncmd = "{sys.executable} -c \\"{test}\\""\ntimeout = "60s"\n'
    )


def _ledger(repo, kind: str) -> list[dict]:
    out = cli("ledger", "tail", "-n", "500", "--kind", kind, "--json", cwd=repo.root).out
    return [json.loads(line) for line in out.splitlines()]


def test_claude_stop_is_blocked_while_verify_fails_then_ends_after_max_repair_loops(repo, coordinator):
    _suite(repo.root, fail=True)  # [verify] is read when the coordinator starts
    coordinator(*FAST)
    assert _answer(_hook("claude", _fixture("claude", "user_prompt_submit.json", repo.root), repo.root)) == {}
    started = _ledger(repo, "turn.started")
    assert started and started[-1]["agent"] == CLAUDE_AGENT and started[-1]["data"]["tree"]
    # a turn that changed nothing ends at once, no verify run
    quiet = _answer(_hook("claude", _fixture("claude", "stop.json", repo.root), repo.root))
    assert quiet == {} and not _ledger(repo, "job.started")
    assert "nothing changed" in _ledger(repo, "stop.decided")[-1]["data"]["reason"]
    # an edit nobody announced: the stop runs verify, which fails: blocked, failures first
    (repo.root / "src" / "app.py").write_text("print('changed')\n")
    first = _answer(_hook("claude", _fixture("claude", "stop.json", repo.root), repo.root))
    assert first["decision"] == "block"
    reason = first["reason"]
    assert reason.index("── test") < reason.index("── lint: passed") and "AssertionError: 1 != 2" in reason
    # Claude Code says it is looping now; still failing: blocked again (round 2 of 2)
    second = _answer(_hook("claude", _fixture("claude", "subagent_stop.json", repo.root), repo.root))
    assert second["decision"] == "block"
    # the bound is reached: the turn ends, the failure report is in the ledger and shown
    third = _answer(_hook("claude", _fixture("claude", "stop.json", repo.root, stop_hook_active=True), repo.root))
    assert "decision" not in third and "verify failing" in third["systemMessage"]
    ended = _ledger(repo, "stop.decided")[-1]
    assert ended["data"]["verdict"] == "escalate" and ended["data"]["failed"] == ["test"]
    assert sum(e["kind"] == "verify.finished" for e in _ledger(repo, "verify.finished")) == 2
    # a new prompt starts a new turn; fixed: the stop runs verify again, which passes
    assert _answer(_hook("claude", _fixture("claude", "user_prompt_submit.json", repo.root), repo.root)) == {}
    _suite(repo.root, fail=False)
    assert _answer(_hook("claude", _fixture("claude", "stop.json", repo.root), repo.root)) == {}
    finished = _ledger(repo, "verify.finished")
    assert len(finished) == 3 and finished[-1]["data"]["passed"] and finished[-1]["data"]["tree"]
    # the same content again: answered from the ledger, nothing runs
    assert _answer(_hook("claude", _fixture("claude", "stop.json", repo.root), repo.root)) == {}
    assert len(_ledger(repo, "verify.finished")) == 3
    assert "passed on this content" in _ledger(repo, "stop.decided")[-1]["data"]["reason"]


def test_done_is_keyed_on_content_and_verify_on_passed_content_answers_at_once(repo, coordinator):
    coordinator(*FAST)
    _suite(repo.root, fail=False)
    cli("intent", "src/app.py", "--agent", "dev", cwd=repo.root)
    assert cli("verify", "--agent", "dev", cwd=repo.root).rc == 0
    assert cli("done", "--agent", "dev", cwd=repo.root).rc == 0
    again = cli("verify", "--agent", "dev", "--json", cwd=repo.root)
    assert again.rc == 0 and "answered from the ledger" in again.json["reason"]
    finished = _ledger(repo, "verify.finished")
    assert len(finished) == 2 and finished[-1]["data"]["reused"] == finished[0]["data"]["job"]
    # an edit nobody announced changes the content: done is blocked
    (repo.root / "src" / "app.py").write_text("print('unannounced')\n")
    blocked = cli("done", "--agent", "dev", "--json", cwd=repo.root)
    assert blocked.rc == 1 and "worktree changed" in blocked.json["reason"]
    # put back as it was: the content that passed passes again
    (repo.root / "src" / "app.py").write_text("print('hi')\n")
    assert cli("done", "--agent", "dev", cwd=repo.root).rc == 0
    # an agent that never announced a write but changed files is not "nothing written"
    (repo.other / "src" / "app.py").write_text("print('bob')\n")
    sneaky = cli("done", "--agent", "bob", "--json", cwd=repo.other)
    assert sneaky.rc == 1 and "no passing verify run has seen" in sneaky.json["reason"]


def test_codex_and_gemini_turn_ends_are_gated_in_their_formats(repo, coordinator):
    _suite(repo.root, fail=True, max_loops=5)
    coordinator(*FAST)
    (repo.root / "src" / "app.py").write_text("print('changed')\n")
    codex = _answer(_hook("codex", _fixture("codex", "stop.json", repo.root), repo.root))
    assert codex["decision"] == "block" and "── test" in codex["reason"]
    gemini = _answer(_hook("gemini", _fixture("gemini", "after_agent.json", repo.root), repo.root))
    assert gemini["decision"] == "deny" and "── test" in gemini["reason"]
    assert _answer(_hook("gemini", _fixture("gemini", "before_agent.json", repo.root), repo.root)) == {}
    assert _ledger(repo, "turn.started")[-1]["agent"].startswith("gemini-")


def test_the_turn_gate_can_be_turned_off_per_repository(repo, coordinator):
    _suite(repo.root, fail=True, turn_gate=False)
    coordinator(*FAST)
    (repo.root / "src" / "app.py").write_text("print('changed')\n")
    assert _answer(_hook("claude", _fixture("claude", "stop.json", repo.root), repo.root)) == {}
    assert "turn_gate = false" in _ledger(repo, "stop.decided")[-1]["data"]["reason"]
    assert not _ledger(repo, "job.started")


def test_with_no_coordinator_a_stop_ends_visibly_or_blocks_under_fail_closed(repo):
    open_end = _answer(_hook("claude", _fixture("claude", "stop.json", repo.root), repo.root))
    assert "decision" not in open_end and "unverified" in open_end["systemMessage"]
    closed = _answer(_hook("claude", _fixture("claude", "stop.json", repo.root), repo.root, "--fail-closed"))
    assert closed["decision"] == "block" and "--fail-closed" in closed["reason"]
    looping = _fixture("claude", "stop.json", repo.root, stop_hook_active=True)
    assert "decision" not in _answer(_hook("claude", looping, repo.root, "--fail-closed"))  # never traps the model
    prompt = _answer(_hook("codex", _fixture("codex", "user_prompt_submit.json", repo.root), repo.root, "--fail-closed"))
    assert "decision" not in prompt and "not tracked" in prompt["systemMessage"]


def test_files_a_shell_call_changed_are_claimed_or_reported_after_the_fact(repo, coordinator):
    coordinator(*FAST)
    assert cli("claim", "src/held.py", "--agent", "alice", cwd=repo.root).rc == 0
    (repo.other / "src" / "dirty.py").write_text("before\n")  # dirty before the call, unchanged by it
    # Claude Code runs a generator whose targets no parser can read
    before = _fixture("claude", "pre_tool_use_bash.json", repo.other, tool_input={"command": "./generate.sh", "description": "Generate"})
    assert _answer(_hook("claude", before, repo.other, env={"LOCKSTEP_AGENT": "bob"})) == {}
    (repo.other / "src" / "held.py").write_text("generated\n")
    (repo.other / "src" / "free.py").write_text("generated\n")
    (repo.other / "src" / "app.py").write_text("print('rewritten')\n")
    after = _fixture("claude", "post_tool_use_bash.json", repo.other, tool_input={"command": "./generate.sh", "description": "Generate"})
    told = _answer(_hook("claude", after, repo.other, env={"LOCKSTEP_AGENT": "bob"}))
    assert told["decision"] == "block" and "src/held.py" in told["reason"] and "alice" in told["reason"]
    assert "src/free.py" not in told["reason"] and told["hookSpecificOutput"]["additionalContext"] == told["reason"]
    unannounced = _ledger(repo, "write.unannounced")
    assert [(e["agent"], e["data"]["paths"], e["data"]["holders"]) for e in unannounced] == [("bob", ["src/held.py"], ["alice"])]
    assert unannounced[0]["data"]["source"] == "claude PostToolUse Bash"
    holders = {c["pattern"]: c["holder"] for c in json.loads(cli("status", "--json", cwd=repo.root).out)["claims"]}
    assert holders["src/free.py"] == "bob" and holders["src/app.py"] == "bob" and "src/dirty.py" not in holders
    # the same after-hook again has no "before": nothing is compared
    assert _answer(_hook("claude", after, repo.other, env={"LOCKSTEP_AGENT": "bob"})) == {}


def test_codex_and_gemini_calls_are_compared_too(repo, coordinator):
    coordinator(*FAST)
    assert cli("claim", "src/held.py", "--agent", "alice", cwd=repo.root).rc == 0
    before = _fixture("codex", "pre_tool_use_bash.json", repo.other)  # echo x > src/main.py
    assert _answer(_hook("codex", before, repo.other, env={"LOCKSTEP_AGENT": "bob"})) == {}
    (repo.other / "src" / "main.py").write_text("x\n")
    (repo.other / "src" / "held.py").write_text("x\n")
    codex = _answer(_hook("codex", _fixture("codex", "post_tool_use_bash.json", repo.other), repo.other, env={"LOCKSTEP_AGENT": "bob"}))
    assert codex["decision"] == "block" and "src/held.py" in codex["reason"] and "src/main.py" not in codex["reason"]
    # Gemini CLI runs a formatter over src/: it rewrites the file bob now holds
    fmt = {"command": "npx prettier --write .", "description": "Format", "directory": "src"}
    carol = {"LOCKSTEP_AGENT": "carol"}
    assert _answer(_hook("gemini", _fixture("gemini", "before_tool_shell.json", repo.other, tool_input=fmt), repo.other, env=carol)) == {}
    (repo.other / "src" / "main.py").write_text("x  \n")
    gemini = _answer(_hook("gemini", _fixture("gemini", "after_tool_shell.json", repo.other, tool_input=fmt), repo.other, env=carol))
    assert "bob" in gemini["hookSpecificOutput"]["additionalContext"] and "src/main.py" in gemini["systemMessage"]
    assert [e["agent"] for e in _ledger(repo, "write.unannounced")] == ["bob", "carol"]


def test_with_no_coordinator_an_after_hook_warns_visibly_and_never_refuses(repo):
    after = _fixture("claude", "post_tool_use_bash.json", repo.root)
    before = _fixture("claude", "pre_tool_use_bash.json", repo.root)
    _hook("claude", before, repo.root)  # no coordinator: the intent fails, so nothing is kept
    assert _answer(_hook("claude", after, repo.root, "--fail-closed")) == {}
