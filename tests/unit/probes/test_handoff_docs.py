"""The worked examples of docs/handoff.md score as the page says, against the evidence it describes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from probes.handoff import score_handoff
from probes.handoff_facts import CheckRun, Evidence, VerifyEvidence

DOCS = Path(__file__).resolve().parents[3] / "docs" / "handoff.md"
TEXT = DOCS.read_text()


def example(name: str) -> str:
    after = TEXT.split(f"<!-- example: {name} -->", 1)[1]
    return re.search(r"```markdown\n(.*?)```", after, re.DOTALL).group(1)


# What the page says bob did: the evidence `lockstep check handoff HANDOFF.md --agent bob` gathers.
BOB = Evidence(
    agent="bob",
    base="main",
    changed=["src/auth.py", "tests/test_auth.py"],
    written=["src/auth.py", "tests/test_auth.py"],
    claimed=["src/limits.py"],
    commits={"3f2a9c1": True, "abc1234": False},
    verify=VerifyEvidence(job="7", passed=True, checks=[CheckRun(name="tests", verdict="pass", target="pytest -q tests", paths=["tests"])]),
    defined_in={"test_lockout": ["tests/test_auth.py"], "test_refund_roundtrip": []},
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    for name in ("src/auth.py", "src/limits.py", "tests/test_auth.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n")
    return tmp_path


def test_the_faked_example_fails_with_the_facts_the_page_names(repo):
    score = score_handoff(example("faked"), repo, evidence=BOB)
    assert not score.passed
    stated = re.search(r"It scores (\d+) of 100 and fails", TEXT)
    assert stated and int(stated.group(1)) == score.score < 85
    listed = TEXT.split("It scores", 1)[1].split("```text\n", 1)[1].split("```", 1)[0].splitlines()
    for line in listed:
        if line.endswith("…"):
            assert any(gap.startswith(line[:-1]) for gap in score.missing), line
        else:
            assert line in score.missing, line
    false = [gap for gap in score.missing if gap.startswith("false: ")]
    assert len(false) == len([x for x in listed if x.startswith("false: ")]), false


def test_the_honest_example_passes_with_every_fact_holding(repo):
    score = score_handoff(example("honest"), repo, evidence=BOB)
    assert score.passed and score.score == 100, score.missing
    assert score.facts and all(f.holds for f in score.facts)
    assert "passes with every fact holding (100 of 100)" in TEXT
