"""Brace expansion as bash does it, bounded: ``src/{a,b}.py`` is ``src/a.py src/b.py``.

A shell word with an unquoted ``{x,y}`` or ``{1..3}`` names the files of its expansion,
not a file called ``{x,y}``; the hooks ask for those before a shell call writes them.

Theory (bash's rules, the parts a file name uses)
-------------------------------------------------
* ``{`` starts a brace expression when its matching ``}`` (nesting counted) encloses
  either a comma at the top level (``{a,b{c,d}}``: alternatives, each expanded in turn)
  or a sequence ``X..Y[..STEP]`` of integers (``{01..10}`` keeps the width) or single
  letters.  Anything else (``{}``, ``{a}``, ``{a..}``) is literal text and the search
  goes on after it.
* Expansion is left to right: the preamble before the expression is kept, each
  alternative is followed by the expansion of the rest of the word, so
  ``x{a,b}{1,2}`` is ``xa1 xa2 xb1 xb2``.
* More than ``limit`` names in all (``{1..99999999}``) raises ``TooMany`` before they
  are built, as does a word of more than ``MAX_BRACES`` braces or ``MAX_WORD_CHARS``
  characters: the caller says the command cannot be read, instead of guessing.

The word arrives without its quotes (``shlex``), so ``'{a,b}'`` expands too: the names
asked for are then more than the command writes, never fewer than bash's reading.
"""

from __future__ import annotations

import re

__all__ = ["TooMany", "expand"]

# A word past these is not read for braces (``TooMany``): no file name needs more, and
# each expression may double the names.
MAX_BRACES = 64
MAX_WORD_CHARS = 1024
_SEQUENCE = re.compile(r"(-?\d{1,18}|[A-Za-z])\.\.(-?\d{1,18}|[A-Za-z])(?:\.\.(-?\d{1,18}))?")  # 64-bit, as bash


class TooMany(ValueError):
    """The word expands to more names than the limit."""


def expand(word: str, limit: int) -> list[str]:
    """The names ``word`` expands to (``[word]`` when it has no brace expression)."""
    if "{" not in word:
        return [word]
    if word.count("{") > MAX_BRACES or len(word) > MAX_WORD_CHARS:
        raise TooMany(f"{word[:80]!r}... has more braces or characters than a file name is read with")
    names: list[str] = []
    pending = [word]  # a stack: depth first, so the names come in bash's order
    while pending:
        current = pending.pop()
        found = _first_expression(current, limit)
        if found is None:
            names.append(current)
            continue
        start, end, alternatives = found
        pending += [current[:start] + alternative + current[end + 1 :] for alternative in reversed(alternatives)]
        if len(names) + len(pending) > limit:
            raise TooMany(f"{word!r} expands to more than {limit} names")
    return names


def _first_expression(word: str, limit: int) -> tuple[int, int, list[str]] | None:
    """(start, end, alternatives) of the first brace expression, or None."""
    for start, (end, commas) in sorted(_pairs(word).items()):
        if commas:
            cuts = [start, *commas, end]
            return start, end, [word[a + 1 : b] for a, b in zip(cuts, cuts[1:])]
        sequence = _sequence(word[start + 1 : end], limit)
        if sequence is not None:
            return start, end, sequence
    return None


def _pairs(word: str) -> dict[int, tuple[int, list[int]]]:
    """Each ``{`` that is closed: its matching ``}`` and its top-level commas (one pass)."""
    pairs: dict[int, tuple[int, list[int]]] = {}
    opened: list[tuple[int, list[int]]] = []
    for i, char in enumerate(word):
        if char == "{":
            opened.append((i, []))
        elif char == "}" and opened:
            start, commas = opened.pop()
            pairs[start] = (i, commas)
        elif char == "," and opened:
            opened[-1][1].append(i)
    return pairs


def _sequence(inner: str, limit: int) -> list[str] | None:
    match = _SEQUENCE.fullmatch(inner)
    if match is None:
        return None
    first, last, step_text = match.groups()
    step = abs(int(step_text)) if step_text else 1
    step = step or 1
    if first.isalpha() != last.isalpha():
        return None  # {a..3}: literal, as in bash
    low, high = (ord(first), ord(last)) if first.isalpha() else (int(first), int(last))
    if abs(high - low) // step + 1 > limit:  # counted, not built: {1..99999999}
        raise TooMany(f"{{{inner}}} is more than {limit} names")
    if first.isalpha():
        return [chr(c) for c in _range(low, high, step)]
    padded = any(len(text.lstrip("-")) > 1 and text.lstrip("-").startswith("0") for text in (first, last))
    width = max(len(first), len(last)) if padded else 0
    return [str(n).zfill(width) if n >= 0 else "-" + str(-n).zfill(width - 1) for n in _range(low, high, step)]


def _range(low: int, high: int, step: int) -> range:
    return range(low, high + 1, step) if low <= high else range(low, high - 1, -step)
