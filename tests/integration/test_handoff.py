"""Handoffs checked against the facts, end to end: a real coordinator, a real git
repository with an agent's worktree and branch, real verify runs (pytest), the ledger.

* a faked note (lorem ipsum, files, a commit and tests bob never had) fails the check
  with each false fact named, and `lockstep done` under `[handoff] required` is refused
  naming them; an honest note of the same work passes, and so does done;
* a `block_agent` response to a handoff finding is lifted only by a passing handoff,
  not by a passing verify run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .conftest import _git, cli

FAST = ("--heartbeat", "0.2", "--liveness", "5", "--lock-delay", "1")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "handoff.md"

LOREM = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor, 42."

FAKED = f"""\
# Handoff

## Primary request
Add refunds to the payment service in `src/payments.py` as the finance team asked.

## Key concepts
{LOREM}

## Work completed
Implemented refunds in src/payments.py; test_refund_roundtrip passes and
tests/test_payments.py passes too. Merged as commit abc1234.

## Decisions
{LOREM}

## Files and code changes
- `src/payments.py`: the refund flow, 120 lines.
- `docs/refunds.md`: how to issue one.

## Unresolved issues
{LOREM}

## Pending tasks
1. Handle partial refunds in `src/payments.py` (about 40 lines).

## Current work
Wiring the refund button in web/refund.tsx; 1 handler is left to write.

## Next step
Write `src/refunds/partial.py` and run `pytest tests/test_payments.py`.
"""


def honest(commit: str) -> str:
    return f"""\
# Handoff: login rate limit

## Primary request
Limit failed logins per account in `src/auth.py`, as the operator asked in the ticket.

## Key concepts
A bucket per account refills one token every 10 seconds; the limit lives in src/limits.py.

## Work completed
Added the bucket to src/auth.py and its tests in tests/test_auth.py; test_lockout passes
in the verify run, as does tests/test_auth.py as a whole. Commit {commit} holds it.

## Decisions
Buckets are kept in memory, not in the database, because restarts are rare and 1 lost
bucket only lets 5 extra attempts through.

## Files and code changes
- `src/auth.py`: calls the bucket before checking the password.
- `tests/test_auth.py`: new, 4 tests for the lockout.

## Unresolved issues
The refill interval is a guess of 10 seconds; nobody measured real login traffic yet.

## Pending tasks
1. Expose the limit in `src/limits.py` as a setting (2 call sites read it).

## Current work
Reading src/limits.py to see where a setting would go; nothing edited there yet, about 30 lines.

## Next step
Edit `src/limits.py` to read the limit from the settings, then run `pytest tests/test_auth.py`.
"""


BLOCK_RULE = '[[rule]]\nfinding = "handoff incomplete"\nresponse = "block_agent"\n'


def _config(extra: str = "") -> str:
    return f'[checks.tests]\ncmd = "{sys.executable} -m pytest -q -p no:cacheprovider tests"\ntimeout = "60s"\n\n' + extra


def _setup(repo, extra: str = "") -> None:
    """lockstep.toml committed in both worktrees (the coordinator reads the main one's
    at start, verify the agent's), and a file bob will claim."""
    (repo.root / "lockstep.toml").write_text(_config(extra))
    _git(repo.root, "add", "lockstep.toml")
    _git(repo.root, "commit", "-q", "-m", "config")
    bob = repo.other
    (bob / "lockstep.toml").write_text(_config(extra))
    (bob / "src" / "limits.py").write_text("LIMIT = 5\n")
    _git(bob, "add", "lockstep.toml", "src/limits.py")
    _git(bob, "commit", "-q", "-m", "config and limits")


def _bob_works(repo) -> str:
    """bob announces and writes his change, commits it; returns the commit id."""
    bob = repo.other
    assert cli("intent", "src/auth.py", "tests/test_auth.py", "--agent", "bob", cwd=bob).rc == 0
    (bob / "src" / "auth.py").write_text("def allowed(failures):\n    return failures < 5\n")
    (bob / "tests").mkdir(exist_ok=True)
    (bob / "tests" / "test_auth.py").write_text(
        "import sys, pathlib\nsys.path.insert(0, str(pathlib.Path(__file__).parents[1] / 'src'))\n"
        "from auth import allowed\n\n\ndef test_lockout():\n    assert not allowed(5)\n"
    )
    _git(bob, "add", "src/auth.py", "tests/test_auth.py")
    _git(bob, "commit", "-q", "-m", "login rate limit")
    assert cli("claim", "src/limits.py", "--agent", "bob", cwd=bob).rc == 0
    return _git(bob, "rev-parse", "HEAD").strip()


def _write_note(repo, text: str) -> None:
    assert cli("intent", "HANDOFF.md", "--agent", "bob", cwd=repo.other).rc == 0
    (repo.other / "HANDOFF.md").write_text(text)


def _ledger(repo, n: int = 400) -> list[dict]:
    out = cli("ledger", "tail", "-n", str(n), "--json", cwd=repo.root).out
    return [json.loads(line) for line in out.splitlines()]


def test_a_faked_note_fails_with_its_false_facts_named_and_done_waits_for_an_honest_one(repo, coordinator):
    _setup(repo, '[handoff]\nrequired = true\nagents = ["bob"]\n')
    coordinator(*FAST)
    commit = _bob_works(repo)
    bob = repo.other

    _write_note(repo, FAKED)
    assert cli("verify", "--agent", "bob", cwd=bob).rc == 0
    no_check = cli("done", "--agent", "bob", "--json", cwd=bob)
    assert no_check.rc == 1 and "a handoff is required" in no_check.json["reason"]

    faked = cli("check", "handoff", "HANDOFF.md", "--agent", "bob", "--json", cwd=bob)
    assert faked.rc == 1, faked.err
    result = faked.json["results"][0]
    details = result["details"]
    assert result["finding"] == "handoff incomplete" and details["score"] < 85 and details["facts_checked"]
    false = {(f["kind"], f["claim"]) for f in details["facts"] if not f["holds"]}
    assert {
        ("changed", "src/payments.py"), ("changed", "docs/refunds.md"), ("commit", "abc1234"),
        ("test", "test_refund_roundtrip"), ("test", "tests/test_payments.py"), ("next step", "src/refunds/partial.py"),
    } <= false
    assert set(details["filler"]) == {"key concepts", "decisions", "unresolved issues"}
    assert "false: commit abc1234 is cited, but no such commit in the repository" in details["missing"]

    refused = cli("done", "--agent", "bob", "--json", cwd=bob)
    assert refused.rc == 1 and refused.json["verdict"] == "block"
    reason = refused.json["reason"]
    assert "the handoff HANDOFF.md did not pass" in reason and "false facts" in reason
    assert "src/payments.py is listed as changed, but bob did not change it" in reason
    assert "commit abc1234 is cited, but no such commit" in reason
    # A note nobody wrote the facts of does not slip through with a lower threshold either.
    assert cli("check", "handoff", "HANDOFF.md", "--threshold", "0", "--agent", "bob", cwd=bob).rc == 1

    _write_note(repo, honest(commit))
    assert cli("verify", "--agent", "bob", cwd=bob).rc == 0
    passed = cli("check", "handoff", "HANDOFF.md", "--agent", "bob", "--json", cwd=bob)
    assert passed.rc == 0, passed.out
    details = passed.json["results"][0]["details"]
    assert details["score"] == 100 and details["facts"] and all(f["holds"] for f in details["facts"])
    kinds = {f["kind"] for f in details["facts"]}
    assert kinds == {"changed", "commit", "path", "test", "next step"}
    done = cli("done", "--agent", "bob", "--json", cwd=bob)
    assert done.rc == 0 and done.json["verdict"] == "pass", done.json

    # alice is not named in [handoff] agents: done does not wait for a note of hers.
    assert cli("done", "--agent", "alice", cwd=repo.root).rc == 0
    checked = [e for e in _ledger(repo) if e["kind"] == "handoff.checked"]
    assert [e["data"]["passed"] for e in checked] == [False, False, True]
    assert checked[0]["agent"] == "bob" and checked[0]["data"]["false_facts"]


def test_a_handoff_block_is_lifted_by_a_passing_handoff_not_by_an_unrelated_passing_verify(repo, coordinator):
    _setup(repo, BLOCK_RULE)
    coordinator(*FAST)
    commit = _bob_works(repo)
    bob = repo.other

    _write_note(repo, FAKED)
    assert cli("check", "handoff", "HANDOFF.md", "--agent", "bob", cwd=bob).rc == 1
    blocks = [e for e in _ledger(repo) if e["kind"] == "agent.blocked"]
    assert len(blocks) == 1 and blocks[0]["data"]["lifted_by"] == "handoff" and blocks[0]["data"]["allow"] == ["HANDOFF.md"]

    assert cli("verify", "--agent", "bob", cwd=bob).rc == 0  # unrelated, passing
    still = cli("intent", "src/auth.py", "--agent", "bob", "--json", cwd=bob)
    assert still.rc == 1 and "blocked by a rule" in still.json["reason"]
    refused = cli("done", "--agent", "bob", "--json", cwd=bob).json["reason"]
    assert "blocked by a rule until its handoff passes" in refused and "commit abc1234 is cited, but no such commit" in refused

    _write_note(repo, honest(commit))  # the note itself may still be written
    assert cli("verify", "--agent", "bob", cwd=bob).rc == 0
    assert cli("check", "handoff", "HANDOFF.md", "--agent", "bob", cwd=bob).rc == 0
    freed = cli("intent", "src/auth.py", "--agent", "bob", "--json", cwd=bob)
    assert freed.rc == 0 and freed.json["verdict"] == "allow", freed.json
