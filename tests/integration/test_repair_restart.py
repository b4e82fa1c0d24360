"""Decisions that outlive a request live in the ledger: a real coordinator killed in
the middle of a repair loop, restarted, continues the count where it stood."""

from __future__ import annotations

import json

from .conftest import cli

FAST = ("--heartbeat", "0.2", "--liveness", "5", "--lock-delay", "1")


def _retries(repo) -> list[tuple[str, int | None]]:
    out = cli("ledger", "tail", "-n", "500", "--json", cwd=repo.root).out
    events = [json.loads(line) for line in out.splitlines()]
    return [(e["data"]["action"], e["data"]["params"].get("attempt")) for e in events if e["kind"] == "rule.response"]


def test_a_restart_mid_repair_loop_continues_the_retry_count(repo, coordinator):
    lost = ("check", "write", "src/app.py", "--sha256", "0" * 64, "--json")
    first = coordinator(*FAST)
    assert cli(*lost, cwd=repo.root).rc == 1  # "write lost": the default rule asks to retry
    assert _retries(repo) == [("retry", 1)]
    first.kill()  # no clean stop, no snapshot: the count must come from the ledger
    second = coordinator(*FAST)
    assert cli(*lost, cwd=repo.root).rc == 1
    assert _retries(repo) == [("retry", 1), ("retry", 2)]
    second.stop()  # a clean stop saves a snapshot: the count is in it too
    coordinator(*FAST)
    assert cli(*lost, cwd=repo.root).rc == 1
    assert cli(*lost, cwd=repo.root).rc == 1  # past the bound of 3: a person decides
    assert _retries(repo) == [("retry", 1), ("retry", 2), ("retry", 3), ("notify", None)]
