"""Captured output, reordered so that the failure is what a reader sees first.

A build log or test run can be thousands of lines in which the one line that matters
("error[E0308]", "E   assert 3 == 4", "Traceback ...") sits in the middle.  Agents and
people read the top of what we hand them, and we truncate to a budget, so the lines
that look like failures go first.

The rule (``errors_first``), deterministic and line-based:

1. Split the text on ``"\\n"``.  A line *looks like a failure* when it matches
   ``ERROR_LINE``: the words error / fail / failed / failure / fatal / panic /
   traceback / exception / assert (any case), Python exception names (``ValueError``),
   pytest's ``E   `` detail lines, rustc's ``error[``, the marks ✗ ✘ ❌, and notes of
   a non-zero exit ("exit status 2", "exited with code 1", "returned non-zero").  The
   heuristic over-selects ("0 errors") rather than misses: a few extra lines on top
   are cheap, a missed error is not.
2. Each such line is selected together with the ``CONTEXT_AFTER`` (2) lines that
   follow it (the frames after a ``Traceback``, the expected/actual pair after an
   assertion); context never reaches across a ``SEPARATOR`` line.
3. Output: the selected lines in their original order, then ``SEPARATOR``, then the
   other lines in their original order.  No failure-looking line: the text is
   returned as it was.  Every line selected: no rest, so no separator.
4. Over ``limit`` characters: keep the head (which is the head of the error part),
   cut at the last line break in the final fifth of the budget if there is one (else
   exactly at ``limit``) and append ``truncation_marker(n)``, which says how many
   characters were dropped.  So the result never exceeds
   ``limit + len(truncation_marker(n))`` with ``n <= len(text) + len(SEPARATOR) + 1``.

Properties (tested with hypothesis): without truncation the output is a permutation
of the input's lines plus at most one separator; every failure-looking line comes
before the separator and none after it; applying ``errors_first`` to its own
untruncated output changes nothing.  Input lines equal to ``SEPARATOR`` are taken to
be ours from an earlier pass and dropped.
"""

from __future__ import annotations

import re

DEFAULT_LIMIT = 8000
CONTEXT_AFTER = 2
SEPARATOR = "----- rest of the output, in order -----"

ERROR_LINE = re.compile(
    r"(?i:\b(?:errors?|fail(?:ed|ure|ures|ing)?|fatal|panic(?:ked)?|traceback"
    r"|exceptions?|assert(?:ion)?)\b)"
    r"|\w(?:Error|Exception)\b"  # ValueError, RuntimeException
    r"|^E {3}"  # pytest assertion detail
    r"|error\["  # rustc error[E0308]
    r"|[✗✘❌]"
    r"|(?i:\bexit(?:ed)?(?:\s+with)?\s+(?:code|status)[\s:=]*-?[1-9])"
    r"|(?i:non-?zero\s+exit|returned\s+non-?zero|segmentation\s+fault|core\s+dumped)"
)


def looks_like_failure(line: str) -> bool:
    return ERROR_LINE.search(line) is not None


def truncation_marker(dropped: int) -> str:
    """The text appended where ``dropped`` characters were cut (starts with a newline)."""
    return f"\n… [truncated {dropped} chars] …"


def errors_first(text: str, limit: int = DEFAULT_LIMIT) -> str:
    """``text`` with failure-looking lines (and 2 lines after each) first, then the
    rest; truncated to ``limit`` characters plus a marker.  See the module docstring."""
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    return truncate(reorder(text), limit)


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
    """Step 4: the head of ``text`` within ``limit`` characters, plus a marker."""
    if len(text) <= limit:
        return text
    # Prefer ending on a whole line, unless that throws away more than a fifth.
    cut = text.rfind("\n", limit - limit // 5, limit + 1)
    if cut < 0:
        cut = limit
    return text[:cut] + truncation_marker(len(text) - cut)
