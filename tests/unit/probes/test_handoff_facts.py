"""Handoffs checked against the facts: filler earns nothing, false claims are named and fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.handoff import SECTIONS, score_handoff
from probes.handoff_facts import (
    CheckRun,
    Evidence,
    VerifyEvidence,
    cited_commits,
    distinct_ratio,
    filler_reason,
    has_number_with_referent,
    passing_claims,
)

LOREM = (
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
    "incididunt ut labore et dolore magna aliqua."
)
# One lorem line and "42 lockstep.toml" under every heading: 100/100 by form alone.
LOREM_DOC = "\n\n".join(f"## {s.title.capitalize()}\n{LOREM}\nRun 42 lockstep.toml." for s in SECTIONS)

HONEST = """\
# Handoff: login rate limit

## Primary request
Limit failed logins per account in `src/auth.py`, as the operator asked in the ticket.

## Key concepts
A bucket per account refills one token every 10 seconds; the limit lives in src/limits.py.

## Work completed
Added the bucket to src/auth.py and its tests in tests/test_auth.py; test_lockout passes
in the verify run, as does tests/test_auth.py as a whole. Commit 3f2a9c1 holds it.

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

FABRICATED = """\
# Handoff: payments

## Primary request
Add refunds to the payment service in `src/payments.py` as the finance team asked.

## Key concepts
Refunds reverse a charge; the gateway client lives in src/gateway.py with 3 endpoints.

## Work completed
Implemented refunds in src/payments.py; test_refund_roundtrip passes and
tests/test_payments.py passes too. Merged as commit abc1234.

## Decisions
Refunds are synchronous because the gateway answers within 2 seconds in practice.

## Files and code changes
- `src/payments.py`: the refund flow, 120 lines.
- `src/gateway.py`: a refund call on the client.
- `docs/refunds.md`: how to issue one.

## Unresolved issues
Partial refunds are not handled; 1 branch of the flow raises for them.

## Pending tasks
1. Handle partial refunds in `src/payments.py` (about 40 lines).

## Current work
Wiring the refund button in web/refund.tsx; 1 handler is left to write.

## Next step
Write `src/refunds/partial.py` and run `pytest tests/test_payments.py`.
"""

FILES = ["src/auth.py", "src/limits.py", "tests/test_auth.py", "lockstep.toml", "src/payments.py", "src/gateway.py", "tests/test_payments.py"]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    for name in FILES:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x\n")
    return tmp_path


def evidence_of_alice(**overrides) -> Evidence:
    """What git and the ledger know when alice really did what HONEST says."""
    fields = dict(
        agent="alice",
        base="main",
        changed=["src/auth.py", "tests/test_auth.py"],
        written=["src/auth.py", "tests/test_auth.py"],
        claimed=["src/limits.py"],
        commits={"3f2a9c1": True},
        verify=VerifyEvidence(
            job="7", passed=True,
            checks=[CheckRun(name="tests", verdict="pass", target="pytest -q tests", paths=["tests"]),
                    CheckRun(name="lint", verdict="pass", target="ruff check .", paths=["."])],
        ),
        defined_in={"test_lockout": ["tests/test_auth.py"]},
    )
    fields.update(overrides)
    return Evidence(**fields)


def false_facts(score) -> list[str]:
    return [f"{f.kind}: {f.claim}" for f in score.facts if not f.holds]


def test_a_lorem_ipsum_document_earns_nothing_for_its_sections(repo):
    form_only = score_handoff(LOREM_DOC, repo)
    assert not form_only.passed and form_only.score < 85
    assert form_only.filler == [s.title for s in SECTIONS]
    for section in SECTIONS:
        assert any(gap.startswith(f"section '{section.title}' is filler: lorem ipsum") for gap in form_only.missing)
    # Sections present (27), nothing substantive, no file named outside the filler.
    assert form_only.score == 27


def test_an_honest_document_passes_with_every_fact_holding(repo):
    score = score_handoff(HONEST, repo, evidence=evidence_of_alice())
    assert score.facts_checked and score.facts
    assert false_facts(score) == []
    assert score.passed and score.score == 100, score.missing
    kinds = {f.kind for f in score.facts}
    assert kinds == {"changed", "commit", "path", "test", "next step"}
    tests = {f.claim for f in score.facts if f.kind == "test"}
    assert tests == {"test_lockout", "tests/test_auth.py"}


def test_a_fabricated_document_fails_below_the_threshold_with_each_false_fact_named(repo):
    auth_only = VerifyEvidence(
        job="7", passed=True, checks=[CheckRun(name="tests", verdict="pass", target="pytest -q tests/test_auth.py", paths=["tests/test_auth.py"])]
    )
    score = score_handoff(FABRICATED, repo, evidence=evidence_of_alice(commits={"abc1234": False}, defined_in={}, verify=auth_only))
    assert not score.passed and score.score < 85, score.score
    assert set(false_facts(score)) >= {
        "changed: src/payments.py",
        "changed: src/gateway.py",
        "changed: docs/refunds.md",
        "commit: abc1234",
        "path: docs/refunds.md",
        "path: web/refund.tsx",
        "test: test_refund_roundtrip",
        "test: tests/test_payments.py",
        "next step: src/refunds/partial.py",
    }
    report = "\n".join(score.missing)
    assert "false: src/payments.py is listed as changed, but alice did not change it" in report
    assert "false: commit abc1234 is cited, but no such commit in the repository" in report
    assert "false: test_refund_roundtrip is said to pass, but not in alice's last verify run (job 7)" in report
    assert "false: the next step names src/refunds/partial.py, which neither exists nor is claimed by alice" in report
    # Each false fact costs the criterion it supports.
    by_name = {b.criterion: b for b in score.breakdown}
    assert by_name["section substantive: work completed"].points == 0
    assert by_name["concrete next step"].points == 0
    assert by_name["referenced files exist"].points < 18


def test_one_false_fact_fails_the_handoff_whatever_its_score(repo):
    score = score_handoff(HONEST, repo, evidence=evidence_of_alice(commits={"3f2a9c1": False}))
    assert false_facts(score) == ["commit: 3f2a9c1"]
    assert score.score >= 85 and not score.passed


def test_a_test_claim_needs_a_verify_run_of_the_agent(repo):
    score = score_handoff(HONEST, repo, evidence=evidence_of_alice(verify=None))
    assert {"test: test_lockout", "test: tests/test_auth.py"} <= set(false_facts(score))
    assert any("alice has no verify run recorded" in gap for gap in score.missing)
    failing = VerifyEvidence(job="9", passed=False, checks=[CheckRun(name="tests", verdict="fail", target="pytest -q tests", paths=["tests"])])
    score = score_handoff(HONEST, repo, evidence=evidence_of_alice(verify=failing))
    assert any("check tests that ran it failed" in gap for gap in score.missing)


def test_a_passing_check_that_runs_no_tests_does_not_vouch_for_one(repo):
    lint_only = VerifyEvidence(job="3", passed=True, checks=[CheckRun(name="lint", verdict="pass", target="ruff check .", paths=["."])])
    score = score_handoff(HONEST, repo, evidence=evidence_of_alice(verify=lint_only))
    assert "test: test_lockout" in false_facts(score)


def test_a_test_named_in_a_passing_output_counts(repo):
    verify = VerifyEvidence(job="4", passed=True, checks=[CheckRun(name="unit", verdict="pass", target="make check", output="tests/test_auth.py::test_lockout PASSED")])
    score = score_handoff(HONEST, repo, evidence=evidence_of_alice(verify=verify, defined_in={}))
    assert [f for f in score.facts if f.kind == "test" and not f.holds] == []


def test_changed_files_count_from_the_ledger_when_git_shows_none(repo):
    landed = evidence_of_alice(changed=[], written=["src/auth.py", "tests/"])
    assert [f for f in score_handoff(HONEST, repo, evidence=landed).facts if f.kind == "changed" and not f.holds] == []
    nobody = evidence_of_alice(changed=[], written=[])
    assert {"changed: src/auth.py", "changed: tests/test_auth.py"} <= set(false_facts(score_handoff(HONEST, repo, evidence=nobody)))


def test_without_evidence_only_the_form_and_the_filler_count(repo):
    score = score_handoff(HONEST, repo)
    assert score.facts == [] and not score.facts_checked and score.passed


def test_filler_detection():
    assert filler_reason(LOREM, set()).startswith("lorem ipsum")
    assert filler_reason("work work work work work work work work work work", set()).startswith("repetitive")
    assert filler_reason("Added the bucket to src/auth.py and its tests, all green now.", set()) is None
    assert distinct_ratio("the cat sat on the mat".split()) == pytest.approx(5 / 6)


def test_a_line_pasted_into_many_sections_earns_nothing(repo):
    pasted = "\n\n".join(f"## {s.title.capitalize()}\nSee lockstep.toml for the 42 settings that matter here." for s in SECTIONS)
    score = score_handoff(pasted, repo)
    assert score.filler == [s.title for s in SECTIONS] and score.score == 27


def test_numbers_need_a_referent():
    assert not has_number_with_referent("42")
    assert not has_number_with_referent("the 42 and 7")
    assert has_number_with_referent("104 tests pass")
    assert has_number_with_referent("waits 10s")
    assert has_number_with_referent("port 8080")


def test_cited_commits_and_passing_claims():
    assert cited_commits("commit 3f2a9c1, not 1234567 nor deadbeef nor src/ab12cd3.py; see https://x.org/ab12cd34") == ["3f2a9c1"]
    body = "test_a passes. test_b fails. tests/test_c.py is green.\n- test_d: not passing yet"
    assert passing_claims(body, ["tests/test_c.py"]) == ["test_a", "tests/test_c.py"]


def test_a_list_of_paths_is_not_repetition_and_files_only_read_are_not_claimed_changed(repo):
    paths = "\n".join(f"- `src/module_{n}.py`: changed" if n % 2 else f"- src/pkg/part_{n}.py" for n in range(1, 13))
    assert filler_reason(paths, set()) is None
    assert filler_reason("\n".join(f"- `src/m{n}.py`: new" for n in range(12)), set()) is None
    assert filler_reason("- src/a.py changed\n" * 12, set()) is not None  # one line twelve times is repetition
    read_only = HONEST.replace(
        "- `tests/test_auth.py`: new, 4 tests for the lockout.",
        "- `tests/test_auth.py`: new, 4 tests for the lockout.\n- `src/limits.py`: read for reference, unchanged.",
    )
    score = score_handoff(read_only, repo, evidence=evidence_of_alice())
    assert false_facts(score) == [] and score.passed, score.missing


def test_the_same_note_and_evidence_always_give_the_same_result(repo):
    import msgspec

    evidence = evidence_of_alice(commits={"abc1234": False}, defined_in={})
    first = msgspec.json.encode(score_handoff(FABRICATED, repo, evidence=evidence))
    for _ in range(3):
        assert msgspec.json.encode(score_handoff(FABRICATED, repo, evidence=evidence)) == first


def test_english_and_code_words_of_the_lorem_passage_are_not_filler():
    assert filler_reason("The job id, the commit id and the session id sit in `ledger.db`; sed edits them, non-stop.", set()) is None
