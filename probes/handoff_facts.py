"""What a handoff document claims, checked against what Lockstep and git know.

Theory
------
The rubric (``probes.handoff``) checks form: a document of the right shape scores well
whatever it says.  This module checks content, deterministically: the claims a document
makes that Lockstep can confirm or refute, each one a ``Fact`` that holds or not.

* **changed**: every path in the files section (but on a line saying it was only read:
  "unchanged", "read only", "for reference"...) was changed by the agent: git shows it
  changed on the agent's branch since its base (committed or not), or the ledger shows
  the agent claimed, announced or wrote it.
* **commit**: every commit id cited (7 to 40 hex digits, at least one letter and one
  digit) names a commit of the repository.
* **path**: every path cited exists, or the agent changed it (a deletion) or claims it.
* **test**: every test name (``test_...``) or test file a sentence of "work completed"
  or "current work" says passes ran in a passing check of the agent's last verify run:
  the check's command or output names it, or the check runs tests (pytest, npm test,
  ...) over a folder that holds the file defining it (no folder: the whole suite).
* **next step**: every path the next step names exists or is claimed by the agent.

And filler earns nothing (``filler``): lorem ipsum, lines repeated across sections,
low word diversity, and numbers with no referent are not substance.

Everything here is pure: the evidence is plain data (``Evidence``), gathered by the
shell (``probes.kinds.handoff`` runs git; the coordinator reads the ledger).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import msgspec

from protocol.errors import PeerError
from protocol.paths import Pattern, overlaps

# Lorem ipsum's vocabulary (the classic passage's words), without those English or code
# shares ("sit", "id", "sed", "integer", "non", "ex"...): a note about a job id is not filler.
LOREM = frozenset(
    """
    lorem ipsum dolor amet consectetur consectetuer adipiscing adipisicing elit eiusmod
    tempor incididunt ut labore dolore magna aliqua enim minim veniam quis nostrud exercitation
    ullamco laboris nisi aliquip commodo consequat duis aute irure reprehenderit voluptate
    velit esse cillum fugiat nulla pariatur excepteur sint occaecat cupidatat proident sunt
    culpa qui officia deserunt mollit anim laborum curabitur vestibulum pellentesque
    aenean mauris nunc vivamus donec quisque etiam phasellus maecenas suspendisse
    fusce praesent morbi nullam proin cras
    """.split()
)
LOREM_MIN = 3  # this many lorem words in a section make it filler...
LOREM_SHARE = 0.15  # ...or two and this share of its words
DIVERSITY_WINDOW = 25  # words per window of the distinct-word ratio
MIN_DIVERSITY = 0.4  # below this mean distinct/total ratio a section is repetition
REPEATED_MIN_WORDS = 2  # a line of at least this many words...
REPEATED_MIN_SECTIONS = 3  # ...found in this many sections is filler (one line pasted everywhere)

# Words that are not the referent of a number ("42 and", "the 42").
_NOT_REFERENTS = frozenset("a an and or the of to in on at is it be as by for with from this that".split())
_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]+")
_NOT_PROSE = re.compile(r"`[^`\n]*`|\S*[/.]\w\S*")  # code spans, paths and dotted names
_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(%|[a-zA-Z]+\b)?")
_COMMIT = re.compile(r"(?<![\w./-])([0-9a-f]{7,40})(?![\w/-])")
_TEST_NAME = re.compile(r"(?<![\w/.-])test_\w+\b(?!\.\w|/)")  # a name, not a file's stem
_PASS = re.compile(r"\b(pass(?:es|ed|ing)?|green|succeed(?:s|ed)?|all (?:tests? )?ok)\b", re.IGNORECASE)
_NOT_PASS = re.compile(
    r"\b(fail\w*|not (?:yet )?pass\w*|n[o']t pass\w*|never pass\w*|red|broken|skip\w*|flak\w*|todo)\b", re.IGNORECASE
)
_TEST_RUNNER = re.compile(
    r"\b(pytest|py\.test|unittest|nose2?|tox|nox|jest|vitest|mocha|ava|jasmine|karma|playwright|cypress|"
    r"rspec|phpunit|ctest|test|tests|spec)\b",
    re.IGNORECASE,
)
_NOT_CHANGED = re.compile(
    r"\b(unchanged|not changed|not modified|untouched|no changes|read[- ]only|only read|for reference|"
    r"reference only|examined|viewed|looked at|read it|context only)\b",
    re.IGNORECASE,
)
_TEST_FILE = re.compile(r"(^|/)(test_[^/]+|[^/]+_test\.\w+|[^/]+\.(test|spec)\.\w+|conftest\.py)$")
_TEST_DIR = re.compile(r"(^|/)(tests?|__tests__|spec)/")


class CheckRun(msgspec.Struct, frozen=True, kw_only=True):
    """One check of a verify run, as the ledger recorded it (``verify.result``)."""

    name: str
    verdict: str
    target: str = ""  # the command line
    output: str = ""  # the output kept in the record (its tail)
    paths: list[str] = []  # tokens of the command that are paths of the repository


class VerifyEvidence(msgspec.Struct, frozen=True, kw_only=True):
    job: str
    passed: bool
    checks: list[CheckRun] = []


class Evidence(msgspec.Struct, frozen=True, kw_only=True):
    """What Lockstep and git know about the agent a handoff is from (all plain data)."""

    agent: str | None = None
    git: bool = True  # the repository is a git repository (else commits and diffs are unknown)
    base: str = ""  # what ``changed`` was compared with (a branch name), for the notes
    changed: list[str] = []  # git: paths changed since the base, committed, staged, unstaged or untracked
    written: list[str] = []  # ledger: paths and patterns the agent claimed, announced (intents) or wrote
    claimed: list[str] = []  # the claims the agent holds now
    commits: dict[str, bool] = {}  # commit id cited -> it names a commit of the repository
    verify: VerifyEvidence | None = None  # the agent's last verify run
    defined_in: dict[str, list[str]] = {}  # test name cited -> files that define it


class Fact(msgspec.Struct, frozen=True, kw_only=True):
    """One checked claim of the document."""

    kind: str  # "changed" | "commit" | "path" | "test" | "next step"
    claim: str  # the path, commit id or test as the document names it
    section: str  # the rubric section it was read from ("" for the whole document)
    holds: bool
    note: str  # why it holds, or what is false

    def sentence(self) -> str:
        """The failed fact as one line of a report."""
        return f"false: {self.note}"


# ---------------------------------------------------------------------------- filler


def filler_reason(body: str, repeated: set[str]) -> str | None:
    """Why a section body is filler (earns nothing), or None.  ``repeated``: the
    normalized lines pasted into many sections (``repeated_lines``)."""
    everything = [w.lower() for w in _WORD.findall(body)]
    lorem = sum(1 for w in everything if w in LOREM)
    if lorem >= LOREM_MIN or (lorem >= 2 and lorem / len(everything) >= LOREM_SHARE):
        return f"lorem ipsum ({lorem} of {len(everything)} words)"
    kept = strip_repeated(body, repeated)
    words = [w.lower() for w in _WORD.findall(kept)]
    if everything and not words:
        return "it only repeats a line pasted into many sections"
    # A path or code span is one token: a list of paths repeats "src" and "py" honestly.
    words = [t.lower() for t in _NOT_PROSE.findall(kept)] + [w.lower() for w in _WORD.findall(_NOT_PROSE.sub(" ", kept))]
    diversity = distinct_ratio(words)
    if len(words) >= 8 and diversity < MIN_DIVERSITY:
        return f"repetitive: {diversity:.0%} distinct words (needs {MIN_DIVERSITY:.0%})"
    return None


def distinct_ratio(words: list[str]) -> float:
    """Mean share of distinct words over windows of ``DIVERSITY_WINDOW`` words (so long
    prose is not penalised for reusing "the")."""
    if not words:
        return 1.0
    if len(words) <= DIVERSITY_WINDOW:
        return len(set(words)) / len(words)
    ratios = [len(set(words[i:i + DIVERSITY_WINDOW])) / DIVERSITY_WINDOW for i in range(0, len(words) - DIVERSITY_WINDOW + 1)]
    return sum(ratios) / len(ratios)


def normalized_line(line: str) -> str:
    return " ".join(re.sub(r"[`*_>#|-]", " ", line).lower().split())


def repeated_lines(bodies: Iterable[str]) -> set[str]:
    """Normalized lines (of at least ``REPEATED_MIN_WORDS`` words) found in
    ``REPEATED_MIN_SECTIONS`` sections or more."""
    seen: dict[str, int] = {}
    for body in bodies:
        for line in {normalized_line(x) for x in body.splitlines()}:
            if len(line.split()) >= REPEATED_MIN_WORDS:
                seen[line] = seen.get(line, 0) + 1
    return {line for line, count in seen.items() if count >= REPEATED_MIN_SECTIONS}


def strip_repeated(body: str, repeated: set[str]) -> str:
    return "\n".join(line for line in body.splitlines() if normalized_line(line) not in repeated)


def has_number_with_referent(text: str) -> bool:
    """A number that says something: with a unit (``10s``, ``40%``) or next to a word
    it counts (``104 tests``, ``port 8080``); a bare "42" has no referent."""
    for match in _NUMBER.finditer(text):
        if match.group(2):
            return True
        before = _WORD.findall(text[max(0, match.start() - 24):match.start()])
        after = _WORD.findall(text[match.end():match.end() + 24])
        near = ([before[-1]] if before else []) + ([after[0]] if after else [])
        if any(w.lower() not in _NOT_REFERENTS and w.lower() not in LOREM for w in near):
            return True
    return False


# ---------------------------------------------------------------------------- claims


def cited_commits(text: str) -> list[str]:
    """Commit-looking ids, first mention first: 7-40 lower-case hex digits with at
    least one letter and one digit (so "1234567" is a number, "deadbeef" a word)."""
    found: dict[str, None] = {}
    for match in _COMMIT.finditer(re.sub(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://\S+", " ", text)):
        token = match.group(1)
        if re.search(r"[a-f]", token) and re.search(r"\d", token):
            found.setdefault(token, None)
    return list(found)


def cited_test_names(text: str) -> list[str]:
    """Test names (``test_...``) the text cites, first mention first."""
    return list(dict.fromkeys(_TEST_NAME.findall(text)))


def not_changed_lines(body: str) -> str:
    """The lines of a files section that say a file was only read ("unchanged", "read
    only", "for reference"...): their paths are cited, not claimed as changed."""
    return "\n".join(line for line in body.splitlines() if _NOT_CHANGED.search(line))


def is_test_file(path: str) -> bool:
    return bool(_TEST_FILE.search(path) or _TEST_DIR.search(path))


def passing_claims(body: str, references: list[str]) -> list[str]:
    """Tests (names and test files) that a sentence of ``body`` says pass.
    ``references``: the repo-relative paths the body cites, to tell test files."""
    claims: dict[str, None] = {}
    for sentence in _sentences(body):
        if not _PASS.search(sentence) or _NOT_PASS.search(sentence):
            continue
        for name in _TEST_NAME.findall(sentence):
            claims.setdefault(name, None)
        for path in references:
            if is_test_file(path) and path in sentence:
                claims.setdefault(path, None)
    return list(claims)


def _sentences(body: str) -> list[str]:
    """Paragraphs and list items, cut at sentence ends."""
    items: list[list[str]] = [[]]
    for line in body.splitlines():
        if not line.strip() or re.match(r"\s*([-*+]|\d+[.)])\s", line):
            items.append([])
        items[-1].append(line.strip())
    sentences = []
    for item in items:
        text = " ".join(x for x in item if x)
        sentences += [s for s in re.split(r"(?<=[.!?])\s+", text) if s]
    return sentences


# ---------------------------------------------------------------------------- checks


def _covers(patterns: Iterable[str], path: str) -> bool:
    try:
        wanted = Pattern.parse(path)
    except PeerError:
        return False
    for text in patterns:
        try:
            if overlaps(Pattern.parse(text), wanted):
                return True
        except PeerError:
            continue
    return False


def _whose(evidence: Evidence) -> str:
    return evidence.agent or "the agent (none named: run the check with --agent)"


def check_changed(path: str, section: str, evidence: Evidence) -> Fact:
    if _covers(evidence.changed, path):
        return Fact(kind="changed", claim=path, section=section, holds=True, note=f"{path} changed since {evidence.base or 'the base'} (git)")
    if _covers(evidence.written, path):
        return Fact(kind="changed", claim=path, section=section, holds=True, note=f"{evidence.agent} claimed or wrote {path} (ledger)")
    against = f"git diff against {evidence.base}" if evidence.git and evidence.base else "git (no base known)" if evidence.git else "git (not a git repository)"
    return Fact(
        kind="changed", claim=path, section=section, holds=False,
        note=f"{path} is listed as changed, but {_whose(evidence)} did not change it: not in the {against}, "
        "and no claim, intent or write of it in the ledger",
    )


def check_commit(commit: str, evidence: Evidence) -> Fact:
    if evidence.commits.get(commit):
        return Fact(kind="commit", claim=commit, section="", holds=True, note=f"commit {commit} exists")
    why = "the repository is not a git repository" if not evidence.git else "no such commit in the repository"
    return Fact(kind="commit", claim=commit, section="", holds=False, note=f"commit {commit} is cited, but {why}")


def check_path(path: str, exists: bool, evidence: Evidence) -> Fact:
    if exists:
        return Fact(kind="path", claim=path, section="", holds=True, note=f"{path} exists")
    if _covers(evidence.changed, path) or _covers(evidence.written, path) or _covers(evidence.claimed, path):
        return Fact(kind="path", claim=path, section="", holds=True, note=f"{path} is gone, but {evidence.agent} changed or claims it")
    return Fact(
        kind="path", claim=path, section="", holds=False,
        note=f"{path} is cited, but it does not exist and {_whose(evidence)} neither changed nor claims it",
    )


def check_next_path(path: str, exists: bool, evidence: Evidence) -> Fact:
    if exists:
        return Fact(kind="next step", claim=path, section="next step", holds=True, note=f"{path} exists")
    if _covers(evidence.claimed, path):
        return Fact(kind="next step", claim=path, section="next step", holds=True, note=f"{evidence.agent} claims {path}")
    return Fact(
        kind="next step", claim=path, section="next step", holds=False,
        note=f"the next step names {path}, which neither exists nor is claimed by {_whose(evidence)}",
    )


def check_test(test: str, section: str, evidence: Evidence, exists: bool = True) -> Fact:
    """``exists``: for a test file, whether it exists (a folder a check runs does not
    vouch for a file that is not in it)."""
    if not exists:
        return Fact(kind="test", claim=test, section=section, holds=False, note=f"{test} is said to pass, but it does not exist")
    verify = evidence.verify
    if verify is None:
        return Fact(
            kind="test", claim=test, section=section, holds=False,
            note=f"{test} is said to pass, but {_whose(evidence)} has no verify run recorded: run `lockstep verify`",
        )
    for check in verify.checks:
        if check.verdict == "pass" and _ran(test, check, evidence):
            return Fact(kind="test", claim=test, section=section, holds=True, note=f"{test} passed in check {check.name!r} of verify run {verify.job}")
    failing = [c.name for c in verify.checks if c.verdict != "pass" and _ran(test, c, evidence)]
    why = f"check {', '.join(failing)} that ran it failed" if failing else "no passing check of it ran it"
    return Fact(
        kind="test", claim=test, section=section, holds=False,
        note=f"{test} is said to pass, but not in {evidence.agent}'s last verify run (job {verify.job}): {why}",
    )


def _ran(test: str, check: CheckRun, evidence: Evidence) -> bool:
    """``check`` ran ``test`` (a test name or a test file)."""
    named = re.compile(rf"(?<![\w/.-]){re.escape(test)}(?![\w-])")
    if named.search(check.target) or named.search(check.output):
        return True
    if not _TEST_RUNNER.search(f"{check.name} {check.target}"):
        return False
    files = evidence.defined_in.get(test, []) if test.startswith("test_") and "/" not in test else [test]
    for file in files:
        if not check.paths or any(p in (".", "./") or file == p.rstrip("/") or file.startswith(p.rstrip("/") + "/") for p in check.paths):
            return True
    return False
