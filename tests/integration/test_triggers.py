"""Verifiers that fire by themselves: a ``[[trigger]]`` runs its probe after an agent's
matching shell command, seen by the agent's real after-tool hook (Claude Code's
payload), against a real coordinator and git worktree; its finding goes through the
rules."""

from __future__ import annotations

import json

from .conftest import cli, wait_until
from .test_turns import CLAUDE_AGENT, _answer, _fixture, _hook

FAST = ("--heartbeat", "0.2", "--liveness", "5", "--lock-delay", "1")


def _ledger(repo, kind: str) -> list[dict]:
    out = cli("ledger", "tail", "-n", "1000", "--kind", kind, "--json", cwd=repo.root).out
    return [json.loads(line) for line in out.splitlines()]


def test_a_build_command_seen_by_the_hook_runs_the_build_probe_and_the_rules(repo, coordinator):
    (repo.root / "dist").mkdir()
    (repo.root / "dist" / "app-1.js").write_text("one")
    (repo.root / "lockstep.toml").write_text(
        '[[probe]]\nname = "bundle"\nkind = "build"\ndir = "dist"\n\n'
        '[[trigger]]\ncommand = "npm run build*"\nprobe = "bundle"\n'
    )
    coordinator(*FAST)

    def after(command: str) -> dict:
        event = _fixture("claude", "post_tool_use_bash.json", repo.root)
        event["tool_input"]["command"] = command
        return _answer(_hook("claude", event, repo.root))

    assert after("ls -la") == {}
    assert _ledger(repo, "job.started") == []  # no trigger matched: nothing recorded
    after("npm run build -- --prod")
    first = wait_until(lambda: [e for e in _ledger(repo, "job.finished") if e["data"]["kind"] == "trigger"], timeout=30, what="the triggered job")
    assert first[0]["data"]["verdict"] == "pass" and first[0]["agent"] == CLAUDE_AGENT
    (result,) = _ledger(repo, "probe.result")
    assert result["data"]["name"] == "bundle" and result["data"]["verdict"] == "pass"
    after("npm   run build")  # the build left dist as it was
    wait_until(lambda: len(_ledger(repo, "rule.response")) == 1, timeout=30, what="the rule's response")
    (response,) = _ledger(repo, "rule.response")
    assert response["data"]["finding"] == "build produced nothing" and response["data"]["action"] == "rollback"
    assert response["data"]["probes"] == ["bundle"] and response["agent"] == CLAUDE_AGENT


def test_a_trigger_naming_no_probe_is_refused(repo):
    (repo.root / "lockstep.toml").write_text('[[trigger]]\ncommand = "make*"\nprobe = "nothing"\n')
    checked = cli("verify", "--json", cwd=repo.root)
    assert checked.rc == 2 and "[[trigger]] #1 key 'probe'" in checked.json["error"]["message"]


def test_the_command_lockstep_run_ran_fires_its_trigger_when_it_exits(repo, coordinator):
    (repo.root / "lockstep.toml").write_text(
        '[[probe]]\nname = "bundle"\nkind = "build"\ndir = "dist"\n\n'
        '[[trigger]]\ncommand = "mkdir -p dist*"\nprobe = "bundle"\n'
    )
    coordinator(*FAST)
    # `run -- sh -c SCRIPT` is seen as SCRIPT, as a hook sees a shell call
    ran = cli("run", "--agent", "builder", "--", "sh", "-c", "mkdir -p dist && echo built > dist/app.js && exit 3", cwd=repo.root)
    assert ran.rc == 3  # the command's own status, triggers or not
    (finished,) = wait_until(lambda: [e for e in _ledger(repo, "job.finished") if e["data"]["kind"] == "trigger"], timeout=30, what="the triggered job")
    assert finished["agent"] == "builder" and finished["data"]["verdict"] == "pass"
    (result,) = _ledger(repo, "probe.result")
    assert result["agent"] == "builder" and result["data"]["name"] == "bundle" and result["data"]["verdict"] == "pass"
    # the same build again leaves dist as it was: the finding reaches the rules
    assert cli("run", "--agent", "builder", "--", "sh", "-c", "mkdir -p dist && echo built > dist/app.js", cwd=repo.root).rc == 0
    wait_until(lambda: len(_ledger(repo, "rule.response")) == 1, timeout=30, what="the rule's response")
    (response,) = _ledger(repo, "rule.response")
    assert response["data"]["finding"] == "build produced nothing" and response["agent"] == "builder"
    # a command no trigger matches starts nothing
    assert cli("run", "--agent", "builder", "--", "true", cwd=repo.root).rc == 0
    assert len([e for e in _ledger(repo, "job.started") if e["data"]["kind"] == "trigger"]) == 2
