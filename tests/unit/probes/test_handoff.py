"""The handoff rubric: good documents pass, skeletons fail with named gaps, files checked."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from probes.handoff import (
    MAX_POINTS,
    MIN_WORDS,
    POINTS_FILES,
    POINTS_NEXT_STEP,
    POINTS_PRESENT,
    POINTS_SUBSTANTIVE,
    SECTIONS,
    HandoffScore,
    file_references,
    score_handoff,
)

DOCS = Path(__file__).resolve().parents[3] / "docs" / "handoff.md"

GOOD = """\
# Handoff: verify loop, session 3

## Primary request
The user asked for a bounded verify loop configured in `lockstep.toml`, with rules
that turn probe findings into responses and no LLM anywhere.

## Key concepts
- A *finding* is a fixed phrase such as `write lost`; rules in probes/rules.py map it to one
  of 7 responses.
- A verify run vouches for writes only if it started after them (ledger seq numbers).

## Work completed
Wrote the config parser in probes/config.py and its 104 tests in tests/test_config.py;
`python -m pytest tests -q` passes on this machine.

## Decisions
We chose `[checks.NAME]` tables over `[[check]]` arrays because names must be unique and
TOML keys already guarantee that; the schema is documented in docs/config.md.

## Files and code changes
- `probes/config.py`: new, parses and validates lockstep.toml (about 600 lines).
- `probes/rules.py`: new, the rule table with 6 default rules.
- `docs/config.md`: every key, type and default, plus a worked example.

## Unresolved issues
The coordinator defaults for `lock_delay` (10 seconds) are a guess and need review by the
owner of coordinator/; nothing in tests/test_config.py pins them.

## Pending tasks
1. Wire `RuleTable.decide` into the coordinator core (2 call sites remain).
2. Add a CLI command that prints the parsed config as JSON.

## Current work
I was finishing the plan executor in probes/plan.py; the replay test still needs the
hypothesis strategy for random plans (about 40 lines).

## Next step
Run `python -m pytest tests/test_plan.py -q`, then fix any failure in probes/plan.py before
touching the docs again.
"""

FILES = [
    "probes/config.py",
    "probes/rules.py",
    "probes/plan.py",
    "tests/test_config.py",
    "tests/test_plan.py",
    "docs/config.md",
    "lockstep.toml",
]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    for name in FILES:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x\n")
    (tmp_path / "coordinator").mkdir()
    return tmp_path


def points(score: HandoffScore, criterion: str) -> int:
    (item,) = [b for b in score.breakdown if b.criterion == criterion]
    return item.points


def test_rubric_totals_100_and_every_criterion_is_listed(repo):
    assert MAX_POINTS == 100
    score = score_handoff(GOOD, repo)
    assert sum(b.max_points for b in score.breakdown) == 100
    assert len(score.breakdown) == 2 * len(SECTIONS) + 2


def test_a_good_document_passes(repo):
    score = score_handoff(GOOD, repo)
    assert score.score >= 85 and score.passed, score.missing
    assert score.score == 100, score.missing
    assert score.missing == [] and score.missing_files == []
    assert score.threshold == 85


def test_a_skeleton_with_headings_only_scores_low_and_lists_the_gaps(repo):
    skeleton = "\n\n".join(f"## {s.title.capitalize()}" for s in SECTIONS)
    score = score_handoff(skeleton, repo)
    assert score.score == len(SECTIONS) * POINTS_PRESENT  # only "present" points
    assert not score.passed
    for section in SECTIONS:
        assert any(f"section '{section.title}' is not substantive" in gap for gap in score.missing)
    assert "the document references no files (name the files you changed)" in score.missing
    assert any(gap.startswith("next step is not concrete") for gap in score.missing)


def test_an_empty_document_scores_zero_and_names_every_section(repo):
    score = score_handoff("", repo)
    assert score.score == 0 and not score.passed
    for section in SECTIONS:
        assert any(gap.startswith(f"missing section: {section.title}") for gap in score.missing)


def test_nonexistent_files_lose_points_and_are_named(repo):
    (repo / "probes" / "plan.py").unlink()
    (repo / "docs" / "config.md").unlink()
    score = score_handoff(GOOD, repo)
    assert score.missing_files == ["docs/config.md", "probes/plan.py"]  # first mention first
    assert "referenced file does not exist: probes/plan.py" in score.missing
    assert "referenced file does not exist: docs/config.md" in score.missing
    references = file_references(GOOD, repo)
    expected = POINTS_FILES * (len(references) - 2) // len(references)
    assert points(score, "referenced files exist") == expected < POINTS_FILES
    (item,) = [b for b in score.breakdown if b.criterion == "referenced files exist"]
    assert "missing: docs/config.md, probes/plan.py" in item.note
    assert score.score == 100 - (POINTS_FILES - expected)


def test_missing_section_costs_its_points(repo):
    without = re.sub(r"## Decisions\n.*?\n\n(?=## )", "", GOOD, flags=re.DOTALL)
    score = score_handoff(without, repo)
    assert score.score == 100 - POINTS_PRESENT - POINTS_SUBSTANTIVE
    assert score.passed
    assert any(gap.startswith("missing section: decisions") for gap in score.missing)


def test_thin_section_is_named(repo):
    thin = GOOD.replace(
        "I was finishing the plan executor in probes/plan.py; the replay test still needs the\n"
        "hypothesis strategy for random plans (about 40 lines).",
        "Plan stuff.",
    )
    score = score_handoff(thin, repo)
    assert points(score, "section substantive: current work") == 0
    assert any("'current work' is not substantive: only 2 words" in gap for gap in score.missing)
    assert any("no concrete reference" in gap for gap in score.missing)


def test_next_step_needs_a_verb_and_a_target(repo):
    vague = GOOD.replace(
        "Run `python -m pytest tests/test_plan.py -q`, then fix any failure in probes/plan.py before\n"
        "touching the docs again.",
        "More of the same, probably something around the remaining parts of the plan idea.",
    )
    score = score_handoff(vague, repo)
    assert points(score, "concrete next step") == 0
    assert any("a concrete target" in gap for gap in score.missing)
    no_verb = GOOD.replace("Run `python", "Maybe `python").replace("then fix any", "then any")
    assert points(score_handoff(no_verb, repo), "concrete next step") == 0
    assert points(score_handoff(GOOD, repo), "concrete next step") == POINTS_NEXT_STEP


def test_scoring_is_deterministic(repo):
    first = score_handoff(GOOD, repo)
    for _ in range(3):
        assert msgspec.json.encode(score_handoff(GOOD, repo)) == msgspec.json.encode(first)


def test_threshold_is_a_parameter(repo):
    score = score_handoff(GOOD.replace("## Decisions", "## Misc"), repo, threshold=95)
    assert score.threshold == 95 and score.score == 92 and not score.passed


def test_heading_forms_and_synonyms(repo):
    claude_style = """\
Summary:
1. Primary Request and Intent:
   The user asked to score handoff notes in `probes/handoff.py` deterministically.

2. Key Technical Concepts:
   - additive rubric with 4 criteria, see probes/rules.py for the style used

**Completed work**
Implemented the scorer in probes/config.py and wrote 12 tests for it.

Design decisions
----------------
Weights are integers so that the total is exactly 100 and reproducible.

### Files changed
- `probes/plan.py` - the plan machine, 600 lines, new in this session.

#### Open issues
Synonym lists may be too narrow; 3 real notes failed to match before the fix.

## TODO
- extend the synonyms in probes/rules.py once 10 more notes are collected

## Status
Halfway through docs/config.md; the rubric table is written, 2 examples remain.

**Next steps:** run `pytest tests/test_handoff.py` and commit.
"""
    score = score_handoff(claude_style, repo)
    assert [b.points for b in score.breakdown[: len(SECTIONS)]] == [POINTS_PRESENT] * len(SECTIONS)
    assert score.passed, score.missing


def test_headings_in_code_blocks_and_urls_do_not_count(repo):
    text = GOOD.replace("## Decisions", "```\n## Decisions\n```") + (
        "\nSee https://example.com/docs/guide.md and and/or read/write notes, Node.js, 3.11.\n"
    )
    score = score_handoff(text, repo)
    assert points(score, "section present: decisions") == 0
    assert score.missing_files == []


def test_file_references():
    text = (
        "Edited `probes/config.py:12` and tests/test_plan.py::test_x, ./README.md, src/ and "
        "`coordinator/core` (see https://x.org/a/b.py); `msgspec.Struct`, e.g. 3.11, "
        "~/notes.md, /etc/hosts, `python -m pytest tests -q`, probes/config.py again."
    )
    assert file_references(text, "/nonexistent-repo") == [
        "probes/config.py",
        "tests/test_plan.py",
        "README.md",
        "src/",
        "coordinator/core",
    ]


def test_dunder_names_and_trailing_punctuation():
    text = "Touched probes/__init__.py, then `__main__.py`. Also agents/hooks/."
    assert file_references(text, "/nonexistent-repo") == [
        "probes/__init__.py", "__main__.py", "agents/hooks/",
    ]


def test_paths_escaping_the_repository_count_as_missing(repo):
    (repo.parent / "outside.md").write_text("x")
    text = GOOD.replace("- `docs/config.md`:", "- `../outside.md`:")
    score = score_handoff(text, repo)
    assert "../outside.md" in score.missing_files


def test_absolute_paths_inside_the_repository_are_checked(repo):
    text = GOOD.replace("- `docs/config.md`:", f"- `{repo}/docs/config.md`:")
    assert score_handoff(text, repo).score == 100
    assert "docs/config.md" in file_references(text, repo)


def test_docs_state_the_weights():
    text = DOCS.read_text()
    for weight, what in [
        (POINTS_PRESENT, "section present"),
        (POINTS_SUBSTANTIVE, "section substantive"),
        (POINTS_FILES, "referenced files exist"),
        (POINTS_NEXT_STEP, "concrete next step"),
    ]:
        assert re.search(rf"\|\s*{what}[^|]*\|\s*{weight}\b", text), (what, weight)
    assert f"≥ {MIN_WORDS} words" in text
    for section in SECTIONS:
        assert section.title in text


def _match_section_by_every_synonym(title: str) -> str | None:
    """The section matcher as first written (every synonym's regex, built per call): the
    reference the precompiled, substring-filtered one must agree with."""
    from probes.handoff import SECTIONS

    normalized = re.sub(r"[*_`#]", "", title).lower().replace("&", " and ")
    normalized = re.sub(r"^\s*(?:\d+[.)]|step\s+\d+:?)\s*", "", normalized)
    normalized = re.sub(r"\s+", " ", normalized).strip(" :.-")
    if not normalized or len(normalized.split()) > 10:
        return None
    best, best_key = None, None
    for order, section in enumerate(SECTIONS):
        for synonym in section.synonyms:
            if re.search(rf"(?<![\w-]){re.escape(synonym)}s?(?![\w-])", normalized):
                candidate = (len(synonym), -order)
                if best is None or candidate > best:
                    best, best_key = candidate, section.key
    return best_key


def test_section_matching_agrees_with_trying_every_synonym():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from probes.handoff import SECTIONS, _match_section

    words = sorted({w for section in SECTIONS for synonym in section.synonyms for w in synonym.split()})
    word = st.sampled_from(words) | st.sampled_from(["s", "-", "&", "1.", "step 2:", "**", "`", "x", "re"]) | st.text(max_size=4)

    @settings(max_examples=400, deadline=None)
    @given(st.lists(word, min_size=1, max_size=8).map(" ".join))
    def agree(title):
        assert _match_section(title) == _match_section_by_every_synonym(title)

    agree()

