"""Handoff documents scored by an explicit, additive, deterministic rubric (no LLM).

Theory
------
A handoff document is the markdown one session of work leaves for the next ("chain
link").  It is useful when the next session can act on it without asking: the request,
what was done and decided, which files changed, what is open and exactly what to do next.
That is checkable without judgement, so it is scored by rules: the same text and the same
repository always give the same score, and every lost point is named.

Rubric (total 100, additive; ``threshold`` defaults to 85):

=====================================  ======  ==========================================
criterion                              points  met when
=====================================  ======  ==========================================
section present (x9)                   3 each  a heading names the section (synonyms below)
section substantive (x9)               5 each  its body has >= 8 words AND a concrete
                                               reference: a path, a `code span`, a fenced
                                               or ``$ `` command, or a number with a
                                               referent; not filler
referenced files exist                 18      scaled: 18 x existing / referenced (rounded
                                               down); 0 when nothing is referenced
concrete next step                     10      the next-step section has an action verb
                                               AND a target: a path, `code`, a command or
                                               a test name
=====================================  ======  ==========================================

Sections, in order: primary request, key concepts, work completed, decisions, files and
code changes, unresolved issues, pending tasks, current work, next step.  A heading
matches a section when it contains one of the section's synonyms as whole words
(case-insensitive, plural "s" allowed); when several sections match, the longest synonym
wins.  Headings are ATX (``## Decisions``), setext, a whole line in bold (``**Decisions**``)
or a numbered line ending in a colon (``4. Decisions:``); a bold label may carry its body
on the same line (``**Next step:** run ...``).  A section's body runs to the next heading
of the same or a higher level, or to the next rubric heading.

File references are tokens made of path characters, taken from the whole document (URLs
removed) that contain a ``/`` or end in a known file extension.  Outside backticks a
token with ``/`` counts only if it ends in ``/`` or in a known extension (so "and/or" is
prose); inside backticks any token with ``/`` counts.  Absolute paths outside the
repository and home paths (``~``) are not checked.  A reference exists when the file or
folder exists under ``repo_root``.

Filler earns nothing and facts must hold (``probes.handoff_facts``): a section of lorem
ipsum, of a line pasted into many sections, or of a few words repeated, gets no
"substantive" points and its paths do not count; a number counts as concrete only with a
referent.  Given ``evidence`` (what Lockstep and git know of the agent), each claim the
document makes is a fact that holds or not (files changed, commits and paths cited,
tests said to pass, next-step paths); a false one costs the points of the criterion it
supports (the references share, the section's "substantive" points, the next step) and
fails the document whatever its score.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

import msgspec

from probes import handoff_facts as facts
from probes.handoff_facts import Evidence, Fact

DEFAULT_THRESHOLD = 85
MIN_WORDS = 8
POINTS_PRESENT = 3
POINTS_SUBSTANTIVE = 5
POINTS_FILES = 18
POINTS_NEXT_STEP = 10
TEST_SECTIONS = ("work_completed", "current_work")  # where "tests pass" claims are read


class Section(msgspec.Struct, frozen=True):
    key: str
    title: str
    synonyms: tuple[str, ...]


SECTIONS: tuple[Section, ...] = (
    Section("primary_request", "primary request",
            ("primary request", "request", "user request", "goal", "objective", "intent",
             "task description", "assignment")),
    Section("key_concepts", "key concepts",
            ("key concepts", "key technical concepts", "concept", "background", "context",
             "glossary", "terminology")),
    Section("work_completed", "work completed",
            ("work completed", "completed", "completed work", "work done", "done so far",
             "accomplished", "what was done", "progress")),
    Section("decisions", "decisions",
            ("decisions", "decision", "design decisions", "decisions made", "rationale",
             "trade-offs", "tradeoffs")),
    Section("files", "files and code changes",
            ("files and code changes", "files", "file changes", "files changed",
             "code changes", "changes", "files and code sections", "key files")),
    Section("unresolved_issues", "unresolved issues",
            ("unresolved issues", "unresolved", "open issues", "known issues", "open problems",
             "blockers", "risks", "issues")),
    Section("pending_tasks", "pending tasks",
            ("pending tasks", "pending", "todo", "to do", "to-do", "remaining work",
             "remaining tasks", "backlog", "open tasks")),
    Section("current_work", "current work",
            ("current work", "current state", "current status", "in progress",
             "where things stand", "status", "work in progress")),
    Section("next_step", "next step",
            ("next step", "next steps", "next action", "next actions", "immediate next step",
             "optional next step")),
)

MAX_POINTS = len(SECTIONS) * (POINTS_PRESENT + POINTS_SUBSTANTIVE) + POINTS_FILES + POINTS_NEXT_STEP
assert MAX_POINTS == 100, MAX_POINTS  # the rubric is documented as totalling 100

# Extensions that make a bare token a file reference.  Deliberately not "any dot": prose
# is full of "e.g.", "3.11" and "msgspec.Struct".
KNOWN_EXTENSIONS = frozenset(
    """
    py pyi pyx ipynb md rst txt toml json jsonl yaml yml ini cfg conf lock env
    js mjs cjs ts tsx jsx vue svelte css scss sass less html htm svg
    rs go c h cc cpp hpp cxx java kt kts scala rb php swift m cs fs ex exs erl hs ml
    sh bash zsh fish ps1 bat sql proto graphql gql xml csv tsv log patch diff
    gradle cmake mk dockerfile tf hcl nix zig lua r jl dart
    """.split()
)
# Prose names that look like files but are products.  Checked outside backticks only.
NOT_FILES = frozenset(
    {"node.js", "next.js", "vue.js", "nuxt.js", "react.js", "express.js", "d3.js",
     "three.js", "chart.js", "deno.js", "ember.js", "backbone.js", "angular.js"}
)
ACTION_VERBS = frozenset(
    """
    add run fix implement write update create remove delete rename refactor test verify
    check commit open edit replace move merge deploy review investigate debug rerun re-run
    install migrate document extend wire call change make finish complete port split revert
    measure benchmark profile reproduce confirm build release publish configure enable
    disable raise lower handle parse validate cover drop restore resume continue start
    """.split()
)

_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_ATX = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_SETEXT = re.compile(r"^\s{0,3}(=+|-+)\s*$")
_BOLD_LABEL = re.compile(r"^\s*(?:[-*+]\s+)?(?:\*\*|__)(.+?)(?:\*\*|__)\s*:?\s*(.*)$")
_NUMBERED = re.compile(r"^\s*\d+[.)]\s+(.+?):\s*$")
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://\S+")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_PATH_CHARS = re.compile(r"[\w.~/-]+")
_WORD = re.compile(r"[A-Za-z0-9][\w'’.-]*")
_TEST_NAME = re.compile(r"\btest_\w+")
_BODY_LEVEL = 7  # bold and numbered headings: deeper than any ATX heading


class CriterionScore(msgspec.Struct, frozen=True):
    criterion: str
    points: int
    max_points: int
    note: str


class HandoffScore(msgspec.Struct, frozen=True, kw_only=True):
    score: int
    threshold: int
    passed: bool
    breakdown: list[CriterionScore]
    missing: list[str]  # human-readable gaps, one per lost criterion
    missing_files: list[str]  # referenced paths that do not exist under repo_root
    facts: list[Fact] = []  # each claim checked against Lockstep and git (with evidence)
    facts_checked: bool = False  # evidence was given: the claims were checked
    filler: list[str] = []  # sections that earn nothing: lorem ipsum, repetition


class _Heading(msgspec.Struct, frozen=True):
    line: int
    body_start: int  # first line of the body (after a setext underline)
    level: int
    section: str | None  # the rubric section it names, if any
    inline: str  # body text on the heading line itself (bold labels)


def score_handoff(
    text: str, repo_root: str | Path, threshold: int = DEFAULT_THRESHOLD, evidence: Evidence | None = None
) -> HandoffScore:
    """Score ``text`` by the rubric in this module's docstring.  With ``evidence`` (what
    Lockstep and git know about the agent: ``probes.handoff_facts``), the document's
    claims are checked too: a false one costs the points of the criterion it supports,
    and any false one fails the handoff."""
    spans = _section_lines(text)
    lines = text.splitlines()
    bodies = {key: span.text for key, span in spans.items()}
    repeated = facts.repeated_lines(bodies.values())
    filler = {key: why for key, body in bodies.items() if (why := facts.filler_reason(body, repeated)) is not None}
    kept = {key: facts.strip_repeated(body, repeated) for key, body in bodies.items() if key not in filler}
    dropped = {index for key in filler for index in spans[key].lines}
    kept_text = facts.strip_repeated("\n".join(x for i, x in enumerate(lines) if i not in dropped), repeated)
    root = Path(repo_root)
    references = file_references(kept_text, repo_root)
    missing_files = [ref for ref in references if not _exists(root, ref)]
    checked = _check_facts(kept, kept_text, references, missing_files, root, evidence) if evidence is not None else []
    false_in = {f.section for f in checked if not f.holds}
    breakdown: list[CriterionScore] = []
    missing: list[str] = []

    for section in SECTIONS:
        body = bodies.get(section.key)
        criterion = f"section present: {section.title}"
        if body is None:
            breakdown.append(CriterionScore(criterion, 0, POINTS_PRESENT, "no heading found"))
            missing.append(
                f"missing section: {section.title} (add a heading such as "
                f"'## {section.title.capitalize()}')"
            )
        else:
            breakdown.append(CriterionScore(criterion, POINTS_PRESENT, POINTS_PRESENT, "found"))

    for section in SECTIONS:
        criterion = f"section substantive: {section.title}"
        if section.key not in bodies:
            breakdown.append(CriterionScore(criterion, 0, POINTS_SUBSTANTIVE, "section missing"))
            continue
        if section.key in filler:
            note = f"filler earns nothing: {filler[section.key]}"
            breakdown.append(CriterionScore(criterion, 0, POINTS_SUBSTANTIVE, note))
            missing.append(f"section '{section.title}' is filler: {filler[section.key]}")
            continue
        body = kept[section.key]
        words = len(_WORD.findall(_strip_markup(body)))
        concrete = _has_concrete_reference(body)
        problems = []
        if words < MIN_WORDS:
            problems.append(f"only {words} words (needs {MIN_WORDS})")
        if not concrete:
            problems.append("no concrete reference (a path, `code`, a command or a number that counts something)")
        if section.title in false_in and section.key in TEST_SECTIONS:
            problems.append("a test it says passes did not pass in the agent's last verify run")
        if problems:
            note = "; ".join(problems)
            breakdown.append(CriterionScore(criterion, 0, POINTS_SUBSTANTIVE, note))
            missing.append(f"section '{section.title}' is not substantive: {note}")
        else:
            breakdown.append(
                CriterionScore(criterion, POINTS_SUBSTANTIVE, POINTS_SUBSTANTIVE,
                               f"{words} words with a concrete reference")
            )

    breakdown.append(_score_references(references, missing_files, checked, evidence is not None, missing))
    next_step = kept.get("next_step") if "next_step" in bodies else None
    if "next_step" in filler:
        next_step = ""
    breakdown.append(_score_next_step(next_step, missing, "next step" in false_in))

    named = set(missing_files)
    missing.extend(f.sentence() for f in checked if not f.holds and not (f.kind == "path" and f.claim in named))
    score = sum(item.points for item in breakdown)
    return HandoffScore(
        score=score,
        threshold=threshold,
        passed=score >= threshold and all(f.holds for f in checked),
        breakdown=breakdown,
        missing=missing,
        missing_files=missing_files,
        facts=checked,
        facts_checked=evidence is not None,
        filler=[s.title for s in SECTIONS if s.key in filler],
    )


def _check_facts(
    kept: dict[str, str], kept_text: str, references: list[str], missing_files: list[str], root: Path, evidence: Evidence
) -> list[facts.Fact]:
    """Every claim of the document Lockstep can check, in document order per kind."""
    checked: list[facts.Fact] = []
    absent = set(missing_files)
    files = kept.get("files", "")
    only_read = set(file_references(facts.not_changed_lines(files), root))
    changed_claims = [path for path in file_references(files, root) if path not in only_read]
    checked += [facts.check_changed(path, "files and code changes", evidence) for path in changed_claims]
    checked += [facts.check_commit(commit, evidence) for commit in facts.cited_commits(kept_text)]
    checked += [facts.check_path(path, path not in absent, evidence) for path in references]
    for key in TEST_SECTIONS:
        body = kept.get(key, "")
        title = next(s.title for s in SECTIONS if s.key == key)
        for test in facts.passing_claims(body, file_references(body, root)):
            checked.append(facts.check_test(test, title, evidence, exists=test not in absent))
    for path in file_references(kept.get("next_step", ""), root):
        checked.append(facts.check_next_path(path, path not in absent, evidence))
    return checked


def _score_references(
    references: list[str], missing_files: list[str], checked: list[facts.Fact], with_facts: bool, missing: list[str]
) -> CriterionScore:
    criterion = "referenced files exist"
    if not references:
        missing.append("the document references no files (name the files you changed)")
        return CriterionScore(criterion, 0, POINTS_FILES, "no file references found")
    if not with_facts:
        existing = len(references) - len(missing_files)
        points = POINTS_FILES * existing // len(references)
        note = f"{existing} of {len(references)} referenced files exist"
        if missing_files:
            note += f"; missing: {', '.join(missing_files)}"
            missing.extend(f"referenced file does not exist: {ref}" for ref in missing_files)
        return CriterionScore(criterion, points, POINTS_FILES, note)
    # With the facts: a reference holds when it exists (or the agent changed or claims
    # it) and, listed as changed, the agent changed it; a cited commit when it exists.
    false = {(f.kind, f.claim) for f in checked if not f.holds}
    commits = [f.claim for f in checked if f.kind == "commit"]
    bad = [r for r in references if ("path", r) in false or ("changed", r) in false] + [c for c in commits if ("commit", c) in false]
    total = len(references) + len(commits)
    points = POINTS_FILES * (total - len(bad)) // total
    note = f"{total - len(bad)} of {total} cited paths and commits hold"
    if bad:
        note += f"; false: {', '.join(bad)}"
    missing.extend(f"referenced file does not exist: {ref}" for ref in missing_files)
    return CriterionScore(criterion, points, POINTS_FILES, note)


def _score_next_step(body: str | None, missing: list[str], false_path: bool = False) -> CriterionScore:
    criterion = "concrete next step"
    if body is None:
        missing.append("no next step: add a 'Next step' section naming an action and its target")
        return CriterionScore(criterion, 0, POINTS_NEXT_STEP, "next-step section missing")
    words = {w.lower().strip(".,;:!?") for w in _WORD.findall(_strip_markup(body))}
    verbs = sorted(words & ACTION_VERBS)
    has_target = bool(
        _CODE_SPAN.search(body) or "```" in body or _TEST_NAME.search(body)
        or _path_tokens(body)
    )
    if verbs and has_target and false_path:
        note = "names a path that neither exists nor is claimed"
        missing.append(f"next step is not concrete: it {note}")
        return CriterionScore(criterion, 0, POINTS_NEXT_STEP, note)
    if verbs and has_target:
        return CriterionScore(criterion, POINTS_NEXT_STEP, POINTS_NEXT_STEP,
                              f"action verb {verbs[0]!r} with a concrete target")
    lacks = []
    if not verbs:
        lacks.append("an action verb (run, fix, add, ...)")
    if not has_target:
        lacks.append("a concrete target (a file, `command` or test)")
    note = "names no " + " and no ".join(lacks)
    missing.append(f"next step is not concrete: it {note}")
    return CriterionScore(criterion, 0, POINTS_NEXT_STEP, note)


# ---------------------------------------------------------------- markdown structure


class _Span(msgspec.Struct):
    """A section's body: (line number, text) of each of its lines; a bold label's own
    line contributes the text after the label."""

    parts: list[tuple[int, str]]

    @property
    def lines(self) -> list[int]:
        return [index for index, _ in self.parts]

    @property
    def text(self) -> str:
        return "\n".join(text for _, text in self.parts)


def _section_lines(text: str) -> dict[str, _Span]:
    """Rubric section key -> its body (repeated headings of a section concatenate)."""
    lines = text.splitlines()
    headings = _headings(lines)
    spans: dict[str, _Span] = {}
    for position, heading in enumerate(headings):
        if heading.section is None:
            continue
        end = len(lines)
        for later in headings[position + 1:]:
            if later.section is not None or later.level <= heading.level:
                end = later.line
                break
        span = spans.setdefault(heading.section, _Span([]))
        if heading.inline:
            span.parts.append((heading.line, heading.inline))
        span.parts.extend((index, lines[index]) for index in range(heading.body_start, end))
    return spans


def _headings(lines: list[str]) -> list[_Heading]:
    headings: list[_Heading] = []
    in_fence = False
    for index, line in enumerate(lines):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence or not line.strip():
            continue
        atx = _ATX.match(line)
        if atx:
            title = atx.group(2)
            headings.append(
                _Heading(index, index + 1, len(atx.group(1)), _match_section(title), "")
            )
            continue
        following = lines[index + 1] if index + 1 < len(lines) else ""
        setext = _SETEXT.match(following)
        if setext and not line.lstrip().startswith(("-", "*", "+", ">", "|")):
            level = 1 if setext.group(1).startswith("=") else 2
            headings.append(_Heading(index, index + 2, level, _match_section(line), ""))
            continue
        bold = _BOLD_LABEL.match(line)
        if bold:
            section = _match_section(bold.group(1))
            if section is not None:
                headings.append(_Heading(index, index + 1, _BODY_LEVEL, section, bold.group(2)))
            continue
        numbered = _NUMBERED.match(line)
        if numbered:
            section = _match_section(numbered.group(1))
            if section is not None:
                headings.append(_Heading(index, index + 1, _BODY_LEVEL, section, ""))
    return headings


# Compiled once, and tried only where the words occur: a document of many headings
# (hostile, or just long) costs little per heading.
_SYNONYM_PATTERNS = tuple(
    (synonym, re.compile(rf"(?<![\w-]){re.escape(synonym)}s?(?![\w-])"), len(synonym), order, section.key)
    for order, section in enumerate(SECTIONS)
    for synonym in section.synonyms
)


def _match_section(title: str) -> str | None:
    """The rubric section a heading title names, by its longest matching synonym."""
    normalized = re.sub(r"[*_`#]", "", title).lower().replace("&", " and ")
    normalized = re.sub(r"^\s*(?:\d+[.)]|step\s+\d+:?)\s*", "", normalized)
    normalized = re.sub(r"\s+", " ", normalized).strip(" :.-")
    if not normalized or len(normalized.split()) > 10:
        return None
    best: tuple[int, int] | None = None  # (synonym length, -section order)
    best_key = None
    for synonym, pattern, length, order, key in _SYNONYM_PATTERNS:
        if synonym in normalized and (best is None or (length, -order) > best) and pattern.search(normalized):
            best, best_key = (length, -order), key
    return best_key


def _strip_markup(body: str) -> str:
    return re.sub(r"[`*#>|]", " ", body)


def _has_concrete_reference(body: str) -> bool:
    if _CODE_SPAN.search(body) or "```" in body or "~~~" in body:
        return True
    if re.search(r"^\s*\$ \S", body, re.MULTILINE):
        return True
    if facts.has_number_with_referent(_URL.sub(" ", body)):
        return True
    return bool(_path_tokens(body))


# ---------------------------------------------------------------- file references


def file_references(text: str, repo_root: str | Path) -> list[str]:
    """Repo-relative paths ``text`` references, first mention first, without duplicates."""
    root = Path(repo_root)
    found: dict[str, None] = {}
    for token in _path_tokens(text):
        relative = _repo_relative(token, root)
        if relative is not None:
            found.setdefault(relative, None)
    return list(found)


def _path_tokens(text: str) -> list[str]:
    """Path-looking tokens, in order: from code spans (lenient) and prose (strict)."""
    text = _URL.sub(" ", text)
    tokens: list[tuple[int, str]] = []
    spans = list(_CODE_SPAN.finditer(text))
    for span in spans:
        inside = span.group(1)
        for match in _PATH_CHARS.finditer(inside):
            token = _clean(match.group())
            if _looks_like_path(token, backticked=True):
                tokens.append((span.start(1) + match.start(), token))
    prose = _CODE_SPAN.sub(lambda m: " " * len(m.group()), text)
    for match in _PATH_CHARS.finditer(prose):
        token = _clean(match.group())
        if _looks_like_path(token, backticked=False):
            tokens.append((match.start(), token))
    return [token for _, token in sorted(tokens)]


def _clean(token: str) -> str:
    # Sentence punctuation clings to paths in prose.  ('_' stays: __init__.py.)
    return token.strip("-").rstrip(".")


def _has_known_extension(token: str) -> bool:
    name = token.rstrip("/").rsplit("/", 1)[-1]
    stem, dot, extension = name.rpartition(".")
    return bool(dot) and bool(re.search(r"[A-Za-z_]", stem)) and extension.lower() in KNOWN_EXTENSIONS


def _looks_like_path(token: str, *, backticked: bool) -> bool:
    if not token or token.startswith("~") or set(token) <= {".", "/", "-"}:
        return False
    if not backticked and token.lower() in NOT_FILES:
        return False
    if "/" in token:
        if not re.search(r"[A-Za-z]", token) or token.startswith("//"):
            return False
        if backticked:
            return True
        return token.endswith("/") or _has_known_extension(token)
    return _has_known_extension(token)


def _repo_relative(token: str, root: Path) -> str | None:
    """``token`` as a repo-relative path, or None when it is not checkable here."""
    if token.startswith("/"):
        try:
            token = str(PurePosixPath(token).relative_to(root.resolve().as_posix()))
        except ValueError:
            return None  # outside the repository: not this rubric's business
        if token == ".":
            return None
    while token.startswith("./"):
        token = token[2:]
    return token or None


def _exists(root: Path, reference: str) -> bool:
    candidate = root / reference
    try:
        resolved_root = root.resolve()
        resolved = candidate.resolve()
    except OSError:
        return False
    if resolved != resolved_root and resolved_root not in resolved.parents:
        return False  # '..' out of the repository counts as missing
    return candidate.exists()
