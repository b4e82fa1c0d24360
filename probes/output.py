"""Captured output, reordered so that the failure is what a reader sees first.

A build log or test run can be thousands of lines in which the one line that matters
("error[E0308]", "E   assert 3 == 4", "Traceback ...") sits in the middle.  Agents and
people read the top of what we hand them, and we truncate to a budget, so the lines
that look like failures go first.

The rule (``errors_first``), deterministic and line-based:

1. Split the text on ``"\\n"``.  A line *looks like a failure* when it matches
   ``ERROR_LINE``: the words error / fail / failed / failure / fatal / panic /
   traceback / exception / assert (any case), Python exception names (``ValueError``),
   pytest's ``E   `` detail lines and ``SUBFAILED`` (pytest 9 subtests), rustc's
   ``error[``, TAP's ``not ok N`` and its ``expected:`` / ``actual:`` diagnostics, go's
   ``--- FAIL``, jest's ``●`` headers, the marks ✗ ✘ ✖ ❌ ×, and notes of a non-zero
   exit ("exit status 2", "exited with code 1", "returned non-zero").  The heuristic
   over-selects ("0 errors") rather than misses: a few extra lines on top are cheap, a
   missed error is not.
2. Each such line is selected together with the ``CONTEXT_AFTER`` (2) lines that
   follow it (the frames after a ``Traceback``, the expected/actual pair after an
   assertion); context never reaches across a ``SEPARATOR`` line.
3. Output: the selected lines in their original order, then ``SEPARATOR``, then the
   other lines in their original order.  No failure-looking line: the text is
   returned as it was.  Every line selected: no rest, so no separator.
4. Over ``limit`` characters, the essentials are kept (``digest``):

   * the runner's **summary**: its totals lines (``TOTALS_LINE``: pytest's ``347
     failed, 4716 passed in 12s``, unittest's ``Ran N tests`` / ``FAILED (…)``, jest's
     and vitest's ``Tests:``, TAP's ``# fail N``, node's ``ℹ fail N``, ``test
     result:`` of cargo, go's ``FAIL pkg 0.1s``) always, and its short summary
     (pytest's ``short test summary info`` section, cargo's list of ``failures:``)
     within half of the budget, saying how many of its lines are not shown;
   * then whole **failure blocks** (``BLOCK_HEADER``: pytest's ``____ test_x ____``,
     unittest's ``FAIL: …``, jest's ``● …``, vitest's ``FAIL x > test``, TAP's ``not ok N``, go's ``--- FAIL:``,
     cargo's ``---- x stdout ----``, node's ``✖ …``): a code frame with its header,
     header first and, in a block too long for what is left, its failure lines first;
     as many as fit, in order, then ``N more failures not shown``;
   * then, with the room left, the other failure-looking lines (errors first).

   When the text has neither a summary nor a failure block, the head of step 3's
   output is kept, cut at the last line break in the final fifth of the budget if
   there is one (else exactly at ``limit``).  Either way ``truncation_marker(n)`` is
   appended, which says how many characters of step 3's output were not kept.  So the
   result never exceeds ``limit + len(truncation_marker(n))`` with ``n <= len(text) +
   len(SEPARATOR) + 1``.  The whole text is kept elsewhere (``probes.checklogs``).

Properties (tested with hypothesis): without truncation the output is a permutation
of the input's lines plus at most one separator; every failure-looking line comes
before the separator and none after it; applying ``errors_first`` to its own
untruncated output changes nothing; truncated output never exceeds the bound above.
Input lines equal to ``SEPARATOR`` are taken to be ours from an earlier pass and dropped.
"""

from __future__ import annotations

import re

DEFAULT_LIMIT = 8000
CONTEXT_AFTER = 2
SEPARATOR = "----- rest of the output, in order -----"
LONGEST_SUMMARY_LINE = 400  # a totals line longer than this is cut (it is not one)

ERROR_LINE = re.compile(
    r"(?i:\b(?:errors?|fail(?:ed|ure|ures|ing)?|fatal|panic(?:ked)?|traceback"
    r"|exceptions?|assert(?:ion)?)\b)"
    r"|\w(?:Error|Exception)\b"  # ValueError, RuntimeException
    r"|^E {3}"  # pytest assertion detail
    r"|SUBFAIL"  # pytest 9 subtests: SUBFAILED[case] test_x.py::test_a - ...
    r"|error\["  # rustc error[E0308]
    r"|^\s*not ok\b"  # TAP (tape, node --test --test-reporter=tap)
    r"|^\s*(?:expected|actual|operator):"  # TAP's YAML diagnostics of a failed assertion
    r"|^\s*--- FAIL\b"  # go test
    r"|^\s*● "  # jest's failing test header
    r"|[✗✘✖❌×]"
    r"|(?i:\bexit(?:ed)?(?:\s+with)?\s+(?:code|status)[\s:=]*-?[1-9])"
    r"|(?i:non-?zero\s+exit|returned\s+non-?zero|segmentation\s+fault|core\s+dumped)"
)

# The runner's totals: the lines that say how many tests ran, passed and failed.
TOTALS_LINE = re.compile(
    # pytest (with or without its ===== frame), also "no tests ran in 0.01s"
    r"^=*\s*(?:\d+ (?:failed|passed|errors?|skipped|xfailed|xpassed|deselected|warnings?|subtests? \w+)"
    r"(?:, \d+ [\w ]+?)*|no tests ran) in \d+(?:\.\d+)?s\b"
    r"|^Ran \d+ tests? in "  # unittest
    r"|^(?:OK|FAILED)(?: \(.*\))?$"  # unittest's verdict
    r"|^(?:Tests|Test Suites|Snapshots):\s+\d"  # jest
    r"|^\s*(?:Test Files|Tests)\s{2,}\d+ (?:failed|passed)"  # vitest
    r"|^# (?:tests|pass|fail|skip|todo|cancelled) \d+$"  # TAP (tape, node --test)
    r"|^ℹ (?:tests|pass|fail|cancelled|skipped|todo) \d+$"  # node --test, spec reporter
    r"|^test result: "  # cargo test
    r"|^error: (?:test failed|\d+ targets? failed)"  # cargo test
    r"|^(?:ok|FAIL)\s+\S+\s+(?:\d+(?:\.\d+)?s|\(cached\)|\[)"  # go test, one line a package
    r"|^(?:FAIL|PASS)$"  # go test
)

# Where one failure's report starts: the header of its code frame.
BLOCK_HEADER = re.compile(
    r"^_{3,} .+ _{3,}$"  # pytest: ____ test_sum ____ (also "ERROR collecting ...")
    r"|^(?:FAIL|ERROR|UNEXPECTED SUCCESS): \S"  # unittest
    r"|^\s*● \S"  # jest
    r"|^\s*FAIL\s+\S+ > "  # vitest: FAIL  src/x.test.ts > suite > test
    r"|^\s*not ok \d+"  # TAP
    r"|^\s*--- FAIL: "  # go test
    r"|^---- .+ ----$"  # cargo test: ---- tests::x stdout ----
    r"|^\s*✖ (?!failing tests:)\S"  # node --test, spec reporter
)

# Where a failure block ends (besides the next header or a totals line): a section rule
# (pytest's ==== lines, unittest's ====), the next passing test, the next test starting.
BLOCK_END = re.compile(
    r"^={5,}"
    r"|^\s*ok \d+"  # TAP
    r"|^\s*# Subtest: "  # node's TAP
    r"|^1\.\.\d+$"  # TAP plan
    r"|^\s*(?:=== RUN|--- PASS|--- SKIP)"  # go test
    r"|^failures:$"  # cargo's list of failed tests after the blocks
)

# Where a short summary starts (it runs to the next totals line or section rule).
SHORT_SUMMARY_START = re.compile(r"^=+ short test summary info =+$|^failures:$")


def looks_like_failure(line: str) -> bool:
    return ERROR_LINE.search(line) is not None


def truncation_marker(dropped: int) -> str:
    """The text appended where ``dropped`` characters were cut (starts with a newline)."""
    return f"\n… [truncated {dropped} chars] …"


def more_failures_note(count: int) -> str:
    return f"… {count} more failure{'s' if count != 1 else ''} not shown …"


def errors_first(text: str, limit: int = DEFAULT_LIMIT) -> str:
    """``text`` with failure-looking lines (and 2 lines after each) first, then the
    rest; over ``limit`` characters, its essentials plus a marker.  See the module
    docstring."""
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    reordered = reorder(text)
    if len(reordered) <= limit:
        return reordered
    kept = digest(text, limit)
    if kept is None:
        return truncate(reordered, limit)
    return kept + truncation_marker(max(0, len(reordered) - len(kept)))


def reorder(text: str) -> str:
    """Steps 1-3 of the rule: failure lines with their context first, no truncation."""
    lines = text.split("\n")
    if not any(ERROR_LINE.search(line) for line in lines):
        return text
    selected = [False] * len(lines)
    context_left = 0
    for index, line in enumerate(lines):
        if line == SEPARATOR:
            context_left = 0  # context stops at an earlier pass's separator
        elif ERROR_LINE.search(line):
            selected[index] = True
            context_left = CONTEXT_AFTER
        elif context_left:
            selected[index] = True
            context_left -= 1
    first = [line for line, chosen in zip(lines, selected) if chosen]
    rest = [line for line, chosen in zip(lines, selected) if not chosen and line != SEPARATOR]
    if not rest:
        return "\n".join(first)
    return "\n".join([*first, SEPARATOR, *rest])


def truncate(text: str, limit: int = DEFAULT_LIMIT) -> str:
    """The head of ``text`` within ``limit`` characters, plus a marker."""
    if len(text) <= limit:
        return text
    return _head(text, limit) + truncation_marker(len(text) - len(_head(text, limit)))


def _head(text: str, limit: int) -> str:
    # Prefer ending on a whole line, unless that throws away more than a fifth.
    if len(text) <= limit:
        return text
    cut = text.rfind("\n", limit - limit // 5, limit + 1)
    return text[: cut if cut >= 0 else limit]


# --------------------------------------------------------------------------- the essentials


class _Parts:
    """``text``'s lines sorted into the summary, the failure blocks and the rest."""

    def __init__(self, text: str) -> None:
        lines = [line for line in text.split("\n") if line != SEPARATOR]
        self.totals: list[int] = []  # indices of totals lines
        self.short: list[int] = []  # indices of short-summary lines (not totals)
        self.blocks: list[list[int]] = []  # each failure block's line indices, header first
        self.lines = lines
        in_short = False
        block: list[int] | None = None
        for index, line in enumerate(lines):
            if TOTALS_LINE.search(line):
                self.totals.append(index)
                in_short = False
                block = None
                continue
            if SHORT_SUMMARY_START.match(line) and not self._cargo_blocks_follow(index):
                in_short = True
                block = None
                self.short.append(index)
                continue
            if in_short:
                if not line.strip() or line.startswith("="):
                    in_short = False  # a blank line or a section rule ends it
                else:
                    self.short.append(index)
                    continue
            if BLOCK_HEADER.search(line):
                block = [index]
                self.blocks.append(block)
            elif block is not None and BLOCK_END.search(line):
                block = None
            elif block is not None:
                block.append(index)
        # A block holds a failure when any of its lines looks like one (a pytest
        # "____ test ____" header also frames passing tests' captured output).
        self.blocks = [b for b in self.blocks if any(ERROR_LINE.search(lines[i]) for i in b)]

    def _cargo_blocks_follow(self, index: int) -> bool:
        """cargo prints ``failures:`` twice: before the ``---- x stdout ----`` blocks
        (not a summary) and before the list of names (the summary)."""
        for line in self.lines[index + 1 : index + 3]:
            if line.startswith("---- "):
                return True
        return False


def digest(text: str, limit: int) -> str | None:
    """The essentials of ``text`` within ``limit`` characters (step 4 of the rule), or
    None when it has neither a runner summary nor a failure block."""
    parts = _Parts(text)
    if not parts.totals and not parts.short and not parts.blocks:
        return None
    lines = parts.lines
    out: list[str] = []
    used = 0

    def add(line: str) -> None:
        nonlocal used
        out.append(line)
        used += len(line) + 1

    # 1. The summary, in its original order: totals always, the head of the short
    # summary within half the budget (the totals' room reserved first).
    totals_size = sum(min(len(lines[i]), LONGEST_SUMMARY_LINE) + 1 for i in parts.totals)
    short_room = limit // 2 - totals_size - 60
    shown_short = 0
    for index in parts.short:
        short_room -= len(lines[index]) + 1
        if short_room < 0:
            break
        shown_short += 1
    short_dropped = len(parts.short) - shown_short
    kept_short = set(parts.short[:shown_short])
    dropped_note = f"… {short_dropped} more line{'s' if short_dropped != 1 else ''} of the summary not shown …"
    for index in sorted([*parts.totals, *parts.short]):
        if index in kept_short or index not in parts.short:
            add(lines[index][:LONGEST_SUMMARY_LINE])
        if short_dropped and index == parts.short[-1]:
            add(dropped_note)
    if used > limit:  # only a tiny budget: even the totals do not fit
        return _head("\n".join(out), limit)

    # 2. Whole failure blocks, in order, as many as fit (one at least, cut if need be).
    note_room = len(more_failures_note(len(parts.blocks))) + 1
    in_summary = set(parts.totals) | set(parts.short)
    shown_blocks = 0
    for block in parts.blocks:
        room = limit - used - note_room
        block_lines = [lines[i] for i in block if i not in in_summary]
        size = sum(len(line) + 1 for line in block_lines)
        if size <= room:
            for line in block_lines:
                add(line)
            shown_blocks += 1
            continue
        if shown_blocks == 0 and room > 0:
            header, body = block_lines[0], "\n".join(block_lines[1:])
            cut = _head(header + "\n" + reorder(body), room - 1)
            for line in cut.split("\n"):
                add(line)
            shown_blocks += 1
        break
    hidden = len(parts.blocks) - shown_blocks
    if hidden:
        add(more_failures_note(hidden))
        return "\n".join(out)[:limit]  # [:limit] bites only when the budget is tiny

    # 3. All blocks shown: the other failure-looking lines, errors first, in the room left.
    in_blocks = {i for b in parts.blocks for i in b}
    others = [lines[i] for i in range(len(lines)) if i not in in_summary and i not in in_blocks]
    if others:
        room = limit - used - 1
        rest = _head(reorder("\n".join(others)), room) if room > 0 else ""
        if rest.strip():
            out.append(rest)
    return "\n".join(out)[:limit]

