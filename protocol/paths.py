r"""Repo-relative path patterns: canonical form, matching, overlap, and an index.

Agents claim parts of one git repository by naming *patterns*.  This module fixes what a
pattern means, decides whether two claims can collide, and finds the colliding claims
among many quickly.  It depends on the standard library only.

Grammar
-------
A pattern is ``/``-separated text, relative to the repository root::

    pattern  := segment ("/" segment)* ["/"]        trailing "/" = folder form
    segment  := "**"                                  zero or more whole folders
              | token+
    token    := "*"                                   any run of characters, never "/"
              | "?"                                   exactly one character, never "/"
              | "[" ["!" | "^"] ["]"] member* "]"     one character from (or, negated,
                                                      not from) the members
              | "\\" ("*" | "?" | "[" | "]")          that character itself (an escape)
              | any other character                   itself
    member   := char | char "-" char                  a single character or a range

* ``src/api/`` (folder form) means the folder itself and everything below it; it is
  exactly ``src/api/**``.  Hence ``**`` matching *zero* folders: ``a/**`` matches ``a``.
* ``**`` is special only as a whole segment; ``a**b`` or ``***`` behave like ``*``.
* In a class, a ``]`` right after ``[``, ``[!`` or ``[^`` is a member, and ``-`` first or
  last is a member.  There are no braces.  A literal ``*``, ``?`` or ``[`` is written
  escaped, ``\*``, ``\?``, ``\[`` (or as a class, ``[*]``); a lone ``]`` is literal and
  ``\]`` means the same.  A backslash escapes only those four characters: any other
  backslash (``a\b``, ``\\``, one inside a class) is refused, since no concrete path
  holds one.  ``escape(path)`` turns a concrete path, whatever it holds, into the
  pattern naming exactly it: a path from an editor or a hook is always a literal, so
  ``app/[slug]/page.tsx`` from a hook becomes ``app/\[slug]/page.tsx``.
* Matching is case-sensitive, on code points (no Unicode normalisation), and a leading
  dot gets no special treatment (``*`` matches ``.env``).

``canonical`` refuses (``PeerError("bad_path", ...)``) empty, absolute (``/x``, ``C:...``)
or over-long patterns, NUL bytes, backslashes escaping nothing, any ``..`` segment (the client resolves
paths before sending, so a ``..`` here could only escape the repository), unbalanced
``[``, reversed ranges and classes matching nothing.  It strips ``./``, drops ``.``
segments, collapses repeated ``/``, keeps a trailing ``/`` and writes escapes one way
(``\]`` becomes ``]``; ``\*``, ``\?``, ``\[`` stay), so one literal path has one text.  ``.`` alone names no path:
the whole repository is ``**``.

Meaning
-------
A *concrete path* is a non-empty sequence of non-empty segments over the alphabet
Sigma = every code point except NUL, ``/`` and ``\\``.  A pattern denotes a set of concrete
paths, L(p).  Each non-``**`` segment denotes a set of segment strings, and each token a
subset of Sigma: a literal is one character, ``?`` is Sigma, a class is a union of
code-point intervals, negated within Sigma; an escaped character is a literal like any
other.  So the overlap rule below needs no change for escapes: ``\*`` is the one-character
set {``*``}, which meets ``*`` only where the other side's token admits ``*``.  Character sets are kept as sorted disjoint
interval tuples, so intersecting two of them - negated or not - is exact.

Overlap rule
------------
``overlaps(a, b)`` is ``L(a) & L(b) != {}``.  It is the same question at two levels:

* paths are words over "segments", where ``**`` is "zero or more of anything" and any
  other segment is one symbol from its set;
* segments are words over characters, where ``*`` is "zero or more of anything" and any
  other token is one character from its set.

At each level we search the product of the two patterns: state ``(i, j)`` means "some
word is matched by ``a[:i]`` and by ``b[:j]``".  From it a wildcard on either side may
stop (``i+1``) or swallow the unit the other side's next element demands (``j+1``), and
two plain elements advance together when their sets intersect (character sets at the
segment level, a recursive segment intersection at the path level).  ``(len a, len b)``
reachable means a common word exists.  A wildcard swallowing the other side's element is
only sound because every element is satisfiable: ``canonical`` refuses empty classes, so
every token matches a character and every segment matches some non-empty string.  The
search is symmetric by construction, and segment pairs are memoised.

This is exact with two deliberate, conservative exceptions, which can only produce
extra conflicts, never missed ones:

* a segment such as ``[.]`` matches only ``.``, which never occurs in a concrete path,
  yet it is treated as matchable;
* the search costs up to (size of a) x (size of b) steps, size being tokens plus
  segments; beyond ``EXACT_WORK_LIMIT`` (patterns of hundreds of wildcard tokens each,
  which no one writes by hand) we answer True rather than stall the coordinator.  The
  limit depends only on the two sizes, so the answer stays symmetric, and it is checked
  after the anchor test, so patterns with disjoint literal prefixes are still disjoint.

Index
-----
The *anchor* of a pattern is its leading run of wildcard-free segments (all of
``src/x.py``; ``("src", "api")`` for ``src/api/``; ``("src",)`` for ``src/**/*.py``;
``()`` for ``**/x.py``).  Two patterns whose anchors differ at a common position are
disjoint, so overlapping patterns have anchors where one is a prefix of the other.
``PatternIndex`` therefore stores each entry in a trie node keyed by its anchor; a query
with anchor A examines only the entries on the root->A path (anchor a prefix of A) and
in the subtree under A (A a prefix of the anchor), and runs ``overlaps`` on those alone.
Anchor-less patterns live at the root and are examined by every query.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Callable, Generic, TypeVar

from protocol.errors import PeerError

__all__ = [
    "EXACT_WORK_LIMIT",
    "MAX_PATTERN_CHARS",
    "MAX_SEGMENTS",
    "Pattern",
    "PatternIndex",
    "canonical",
    "escape",
    "overlaps",
]

MAX_PATTERN_CHARS = 4096
MAX_SEGMENTS = 256
# Above this product of pattern sizes, overlaps() answers a conservative True.
EXACT_WORK_LIMIT = 250_000

# A character set is a tuple of sorted, disjoint, non-adjacent inclusive code-point
# intervals.
CharSet = tuple[tuple[int, int], ...]

_MAX_CODEPOINT = 0x10FFFF
# Code points a concrete path segment can never contain.
_FORBIDDEN: CharSet = ((0, 0), (ord("/"), ord("/")), (ord("\\"), ord("\\")))

# Within a segment, a token is a CharSet or STAR; a compiled pattern is a tuple whose
# items are token tuples or GLOBSTAR.  None is used for both wildcards: it is a hashable
# singleton (so compiled segments can key the memo) and never confused with a tuple.
STAR = None
GLOBSTAR = None

_WILDCARD_CHARS = frozenset("*?[")
_ESCAPABLE = frozenset("*?[]")
# A backslash followed by anything but an escapable character (or by nothing).
_BAD_BACKSLASH = re.compile(r"\\(?![*?\[\]])")
_WINDOWS_DRIVE = re.compile(r"[A-Za-z]:")
CONTROL_CHARACTER = re.compile("[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1: what terminals act on
# A plain file path, the common claim: ASCII letters, digits and _ . + @ , = ~ % - in
# non-empty segments joined by single slashes.  No wildcard, escape, drive or empty
# segment can be in it.  (Deleting these bytes leaves nothing: cheaper than a regex.)
_PLAIN_BYTES = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.+@,=~%-/"


# --------------------------------------------------------------------------- charsets


def _merge(intervals: list[tuple[int, int]]) -> CharSet:
    """Sort and merge possibly overlapping intervals into canonical CharSet form."""
    merged: list[tuple[int, int]] = []
    for low, high in sorted(intervals):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return tuple(merged)


def _subtract(base: CharSet, removed: CharSet) -> CharSet:
    """The code points of ``base`` not in ``removed`` (both canonical)."""
    result: list[tuple[int, int]] = []
    for low, high in base:
        cursor = low
        for removed_low, removed_high in removed:
            if removed_high < cursor or removed_low > high:
                continue
            if removed_low > cursor:
                result.append((cursor, removed_low - 1))
            cursor = max(cursor, removed_high + 1)
            if cursor > high:
                break
        if cursor <= high:
            result.append((cursor, high))
    return tuple(result)


def _charsets_intersect(first: CharSet, second: CharSet) -> bool:
    i = j = 0
    while i < len(first) and j < len(second):
        if first[i][1] < second[j][0]:
            i += 1
        elif second[j][1] < first[i][0]:
            j += 1
        else:
            return True
    return False


def _charset_has(charset: CharSet, codepoint: int) -> bool:
    for low, high in charset:
        if codepoint < low:
            return False
        if codepoint <= high:
            return True
    return False


# Everything a path segment may contain: what "?" matches and what "[!...]" negates within.
_SIGMA: CharSet = _subtract(((0, _MAX_CODEPOINT),), _FORBIDDEN)


# --------------------------------------------------------------------------- parsing


def _show(text: object) -> str:
    """The input as quoted in error messages: its repr, shortened if huge."""
    if isinstance(text, str) and len(text) > 80:
        return f"{text[:60]!r}... ({len(text)} characters)"
    return repr(text)


def _bad(text: object, problem: str) -> PeerError:
    return PeerError("bad_path", f"path {_show(text)} {problem}")


def _split_checked(text: object, escapes: bool = False) -> tuple[tuple[str, ...], bool]:
    """Validate the path-level rules shared by patterns and concrete paths.

    Returns the normalised segments and whether the text is in folder form (ends in
    ``/``, or in a ``.`` segment, which names a folder).  Glob syntax is not looked at;
    with ``escapes`` (a pattern) a backslash before ``* ? [ ]`` is allowed.
    """
    if not isinstance(text, str):
        raise _bad(text, f"must be a string, not {type(text).__name__}")
    if text == "":
        raise _bad(text, "is empty; name a file ('src/x.py'), a folder ('src/') or a glob ('src/**/*.py')")
    # Checked on the raw text: it bounds all later work, whatever normalisation removes.
    if len(text) > MAX_PATTERN_CHARS:
        raise _bad(text, f"is {len(text)} characters long; the limit is {MAX_PATTERN_CHARS}")
    if "\x00" in text:
        raise _bad(text, "contains a NUL byte; remove it")
    if "\\" in text and (not escapes or _BAD_BACKSLASH.search(text)):
        raise _bad(
            text,
            "contains a backslash; separate folders with '/' (a backslash only escapes "
            "'*', '?', '[' or ']': write '\\*' or '[*]' for a literal '*')",
        )
    if text.startswith("/"):
        relative = text.lstrip("/")
        hint = f"e.g. {relative!r}" if relative else "the whole repository is '**'"
        raise _bad(text, f"is absolute; give it relative to the repository root ({hint})")
    if _WINDOWS_DRIVE.match(text):
        raise _bad(text, "starts with a Windows drive; give it relative to the repository root, with '/'")
    raw_segments = text.split("/")
    if ".." in raw_segments:
        raise _bad(
            text,
            "contains a '..' segment, which could escape the repository; "
            "resolve it on the client before sending",
        )
    is_folder = raw_segments[-1] in ("", ".")
    segments = tuple(segment for segment in raw_segments if segment not in ("", "."))
    if not segments:
        raise _bad(text, "names no file or folder; to claim the whole repository use '**'")
    if len(segments) > MAX_SEGMENTS:
        raise _bad(text, f"has {len(segments)} segments; the limit is {MAX_SEGMENTS}")
    return segments, is_folder


def _plain_segments(text: object) -> tuple[str, ...] | None:
    """The segments of a plain file path that needs no normalising, or None (then the
    general parse decides: it may still be valid)."""
    if not isinstance(text, str) or len(text) > MAX_PATTERN_CHARS or not text.isascii():
        return None
    if text.encode().translate(None, _PLAIN_BYTES):  # some other character
        return None
    segments = tuple(text.split("/"))
    if len(segments) > MAX_SEGMENTS or "" in segments or "." in segments or ".." in segments:
        return None
    return segments


def _parse_class(segment: str, start: int, text: str) -> tuple[CharSet, int]:
    """Parse the class opening at ``segment[start] == '['``; return it and the next index."""
    index = start + 1
    negated = index < len(segment) and segment[index] in "!^"
    if negated:
        index += 1
    members: list[tuple[int, int]] = []
    first = True
    while True:
        if index >= len(segment):
            raise _bad(text, "has a '[' without a closing ']'; write '[[]' for a literal '['")
        char = segment[index]
        if char == "\\":
            raise _bad(text, "has a backslash inside a character class; put ']' first to include it ('[]a]')")
        if char == "]" and not first:
            index += 1
            break
        first = False
        is_range = index + 2 < len(segment) and segment[index + 1] == "-" and segment[index + 2] != "]"
        if is_range:
            low, high = ord(char), ord(segment[index + 2])
            if low > high:
                raise _bad(
                    text,
                    f"has the reversed range '{char}-{segment[index + 2]}' in a character class; "
                    f"write '{segment[index + 2]}-{char}'",
                )
            members.append((low, high))
            index += 3
        else:
            members.append((ord(char), ord(char)))
            index += 1
    member_set = _merge(members)
    if negated:
        charset = _subtract(_SIGMA, member_set)
    else:
        # A range such as '+-0' spans '/', which no segment contains.
        charset = _subtract(member_set, _FORBIDDEN)
    if not charset:
        # Refused because the overlap search relies on every token being satisfiable.
        raise _bad(text, f"has the character class {segment[start:index]!r}, which matches no character")
    return charset, index


def _compile_segment(segment: str, text: str) -> tuple | None:
    """Compile one segment to GLOBSTAR or a tuple of tokens (CharSet or STAR)."""
    if segment == "**":
        return GLOBSTAR
    tokens: list = []
    index = 0
    while index < len(segment):
        char = segment[index]
        if char == "*":
            # Runs of '*' (including a non-whole-segment '**') mean the same as one.
            if not tokens or tokens[-1] is not STAR:
                tokens.append(STAR)
            index += 1
        elif char == "?":
            tokens.append(_SIGMA)
            index += 1
        elif char == "[":
            charset, index = _parse_class(segment, index, text)
            tokens.append(charset)
        elif char == "\\":
            escaped = segment[index + 1]  # _split_checked made sure one follows
            tokens.append(((ord(escaped), ord(escaped)),))
            index += 2
        else:
            tokens.append(((ord(char), ord(char)),))
            index += 1
    return tuple(tokens)


def _compile_segments(segments: tuple[str, ...], is_folder: bool, text: str) -> tuple:
    compiled = tuple(_compile_segment(segment, text) for segment in segments)
    return compiled + (GLOBSTAR,) if is_folder else compiled  # 'x/' is exactly 'x/**'


def _scan_segment(segment: str) -> tuple[str, bool, str]:
    """One raw segment -> (canonical text, whether it has a wildcard, its literal name).

    Escapes are written one way (``\\]`` -> ``]``); class text is copied as it is, and
    its validity is left to ``_compile_segment``.  The name is meaningful only without
    a wildcard: the concrete segment the text denotes.
    """
    if "\\" not in segment and _WILDCARD_CHARS.isdisjoint(segment):
        return segment, False, segment
    out: list[str] = []
    name: list[str] = []
    wild = False
    index = 0
    while index < len(segment):
        char = segment[index]
        if char == "\\" and index + 1 < len(segment):
            escaped = segment[index + 1]
            out.append(escaped if escaped == "]" else char + escaped)
            name.append(escaped)
            index += 2
        elif char == "[":
            wild = True
            end = index + 1
            if end < len(segment) and segment[end] in "!^":
                end += 1
            if end < len(segment) and segment[end] == "]":
                end += 1
            while end < len(segment) and segment[end] != "]":
                end += 1
            out.append(segment[index : end + 1])
            index = end + 1
        else:
            wild = wild or char in "*?"
            out.append(char)
            name.append(char)
            index += 1
    return "".join(out), wild, "".join(name)


def escape(path: str) -> str:
    """The pattern naming exactly the concrete path ``path``: ``*``, ``?`` and ``[`` are
    escaped, so ``app/[slug]/page.tsx`` -> ``app/\\[slug]/page.tsx``.  Not validated:
    pass the result to ``canonical``."""
    return re.sub(r"([*?\[])", r"\\\1", path)


def canonical(text: str) -> str:
    """Validate a repo-relative pattern and return its canonical text.

    Raises ``PeerError("bad_path", ...)`` with a sentence naming the input and the fix.
    """
    return Pattern(text).text


# --------------------------------------------------------------------------- matching


def _segment_matches(tokens: tuple, name: str) -> bool:
    """Whether the concrete segment ``name`` matches ``tokens`` (greedy, backtrack to last star)."""
    token_index = name_index = 0
    star_token = -1  # index of the last STAR seen, -1 if none
    star_name = 0  # where in name that STAR's match currently ends
    while name_index < len(name):
        if token_index < len(tokens):
            token = tokens[token_index]
            if token is STAR:
                star_token, star_name = token_index, name_index
                token_index += 1
                continue
            if _charset_has(token, ord(name[name_index])):
                token_index += 1
                name_index += 1
                continue
        if star_token < 0:
            return False
        # Let the last star eat one more character and retry after it.  Earlier stars
        # never need to grow: that is the standard argument for single-star backtracking.
        star_name += 1
        name_index = star_name
        token_index = star_token + 1
    while token_index < len(tokens) and tokens[token_index] is STAR:
        token_index += 1
    return token_index == len(tokens)


def _path_matches(compiled: tuple, names: tuple[str, ...]) -> bool:
    """The same greedy algorithm one level up: '**' against whole segments."""
    segment_index = name_index = 0
    globstar_segment = -1
    globstar_name = 0
    while name_index < len(names):
        if segment_index < len(compiled):
            segment = compiled[segment_index]
            if segment is GLOBSTAR:
                globstar_segment, globstar_name = segment_index, name_index
                segment_index += 1
                continue
            if _segment_matches(segment, names[name_index]):
                segment_index += 1
                name_index += 1
                continue
        if globstar_segment < 0:
            return False
        globstar_name += 1
        name_index = globstar_name
        segment_index = globstar_segment + 1
    while segment_index < len(compiled) and compiled[segment_index] is GLOBSTAR:
        segment_index += 1
    return segment_index == len(compiled)


# --------------------------------------------------------------------------- overlap


def _product_reachable(
    first: tuple,
    second: tuple,
    start: int,
    units_compatible: Callable[[object, object], bool],
) -> bool:
    """Whether some word is matched by both element sequences (see "Overlap rule").

    An element that is None is the level's wildcard (STAR or GLOBSTAR): zero or more
    units.  Any other element is exactly one unit, and ``units_compatible(x, y)`` says
    whether two such elements accept a common unit.  Both sequences start at ``start``
    (a common prefix known to pair up).  Symmetric in ``first``/``second``.
    """
    first_len, second_len = len(first), len(second)
    seen = {(start, start)}
    pending = [(start, start)]
    while pending:
        i, j = pending.pop()
        if i == first_len and j == second_len:
            return True
        first_element = first[i] if i < first_len else ()
        second_element = second[j] if j < second_len else ()
        first_left, second_left = i < first_len, j < second_len
        moves = []
        if first_left and first_element is None:
            moves.append((i + 1, j))  # the wildcard takes nothing more
            if second_left and second_element is not None:
                moves.append((i, j + 1))  # it takes the unit second's element needs
        if second_left and second_element is None:
            moves.append((i, j + 1))
            if first_left and first_element is not None:
                moves.append((i + 1, j))
        if (
            first_left
            and second_left
            and first_element is not None
            and second_element is not None
            and units_compatible(first_element, second_element)
        ):
            moves.append((i + 1, j + 1))
        for move in moves:
            if move not in seen:
                seen.add(move)
                pending.append(move)
    return False


@lru_cache(maxsize=1 << 16)
def _segments_intersect(first: tuple, second: tuple) -> bool:
    """Whether two compiled (non-``**``) segments match a common segment string."""
    return _product_reachable(first, second, 0, _charsets_intersect)


def overlaps(a: Pattern, b: Pattern) -> bool:
    """True iff some concrete path matches both patterns.  Symmetric.

    Exact, except that segments able to match only ``.`` or ``..`` (e.g. ``[.]``) count as
    matchable, and that huge wildcard pairs (see ``EXACT_WORK_LIMIT``) count as
    overlapping: such answers err towards a conflict, never towards "no conflict".
    """
    if a.text == b.text:
        return True  # every pattern matches at least one path
    # Anchor segments are literal names: differing at a shared position means disjoint.
    shared = min(len(a.anchor), len(b.anchor))
    if a.anchor[:shared] != b.anchor[:shared]:
        return False
    # A literal denotes one path; put it first so the answer does not depend on order.
    if b.is_literal and not a.is_literal:
        a, b = b, a
    if a.is_literal:
        if b.is_literal:
            return False  # two different canonical paths
        return _path_matches(b._tokens(), a.names)
    if a._size * b._size > EXACT_WORK_LIMIT:
        return True  # exactness would be costly; a false conflict is the safe error
    return _product_reachable(a._tokens(), b._tokens(), shared, _segments_intersect)


# --------------------------------------------------------------------------- Pattern


class _PatternSlots:
    """A ``Pattern``'s storage, assignable while one is built: ``Pattern`` refuses any
    assignment, and going around that (``object.__setattr__``) costs more than all the
    rest of building a plain path's pattern."""

    __slots__ = ("text", "segments", "anchor", "names", "is_literal", "is_folder", "_compiled", "_size")


class Pattern(_PatternSlots):
    """A validated pattern.  Immutable and hashable; equal iff canonical texts are equal.

    ``Pattern(text)`` and ``Pattern.parse(text)`` are the same.  Attributes:

    * ``text`` - canonical text (trailing ``/`` kept for folders);
    * ``segments`` - its segments (canonical text), without the folder's trailing empty one;
    * ``anchor`` - the leading wildcard-free segments (canonical text);
    * ``names`` - the concrete names the anchor segments denote (escapes undone);
    * ``is_literal`` - no wildcard and not a folder: names exactly one path;
    * ``is_folder`` - folder form (``src/api/``, meaning ``src/api/**``).
    """

    __slots__ = ()

    text: str
    segments: tuple[str, ...]
    anchor: tuple[str, ...]
    names: tuple[str, ...]
    is_literal: bool
    is_folder: bool
    _compiled: tuple
    _size: int  # tokens plus segments: bounds the overlap search's work

    def __new__(cls, text: str) -> Pattern:
        # Built as its storage class, whose slots take plain assignment, then turned
        # into a Pattern (same layout: Python allows the switch), immutable from then on.
        self = _PatternSlots()
        plain = _plain_segments(text)
        if plain is not None:  # the general parse below gives the same, several times slower
            self.text = text
            self.segments = self.anchor = self.names = plain
            self.is_folder = False
            self.is_literal = True
            self._compiled = None
            self._size = len(text) + 1
            self.__class__ = cls
            return self
        raw_segments, is_folder = _split_checked(text, escapes=True)
        scanned = [_scan_segment(segment) for segment in raw_segments]
        segments = tuple(canonical_text for canonical_text, _, _ in scanned)
        anchor_length = 0
        while anchor_length < len(scanned) and not scanned[anchor_length][1]:
            anchor_length += 1
        self.text = "/".join(segments) + ("/" if is_folder else "")
        self.segments = segments
        self.anchor = segments[:anchor_length]
        self.names = tuple(name for _, _, name in scanned[:anchor_length])
        self.is_folder = is_folder
        self.is_literal = anchor_length == len(segments) and not is_folder
        if self.is_literal:
            # Compiled on first use: most live claims are literal paths, compared by
            # text, and per-character token tuples for each would only feed the GC.
            self._compiled = None
            self._size = sum(len(segment) + 1 for segment in segments)
        else:
            compiled = _compile_segments(segments, is_folder, text)
            self._compiled = compiled
            self._size = sum(1 if segment is GLOBSTAR else len(segment) + 1 for segment in compiled)
        self.__class__ = cls
        return self

    def _tokens(self) -> tuple:
        if self._compiled is None:
            object.__setattr__(self, "_compiled", _compile_segments(self.segments, self.is_folder, self.text))
        return self._compiled

    # ``Pattern.parse(text)``: see ``_parse``, which the class is given once it exists.
    parse: Callable[[str], Pattern]

    def matches(self, path: str) -> bool:
        """Whether the concrete repo-relative path matches.

        ``path`` is normalised like a pattern (``./``, ``//`` and a trailing ``/`` are
        ignored) but its characters are all literal.  A bad path raises ``bad_path``.
        Usually linear; adversarial star-heavy patterns cost up to
        len(pattern) x len(path) steps, both capped at ``MAX_PATTERN_CHARS``.
        """
        names, _ = _split_checked(path)
        if self.is_literal:
            return names == self.names
        return _path_matches(self._tokens(), names)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Pattern is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Pattern is immutable; cannot delete {name!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Pattern):
            return NotImplemented
        return self.text == other.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"Pattern({self.text!r})"

    def __str__(self) -> str:
        return self.text

    def __reduce__(self) -> tuple:
        return (Pattern, (self.text,))


@lru_cache(maxsize=1 << 16)
def _parse(text: str) -> Pattern:
    """Validate ``text`` (see ``canonical``) and build its pattern (memoised: patterns
    are immutable, and the same texts come back again and again)."""
    return Pattern(text)


# The cache itself, not a method calling it: a claim parses its path twice (the core,
# then the registry applying the grant) and a Python call costs more than a cache hit.
Pattern.parse = staticmethod(_parse)


# --------------------------------------------------------------------------- index

Item = TypeVar("Item")


class _TrieNode(Generic[Item]):
    __slots__ = ("children", "entries")

    def __init__(self) -> None:
        self.children: dict[str, _TrieNode[Item]] = {}
        # Entries whose anchor ends exactly here, grouped by pattern so that one
        # overlap test serves every item claiming the same pattern: pattern text ->
        # (pattern, items).  Keyed by the text (equal patterns, equal texts): a str
        # hashes without calling Pattern.__hash__.
        self.entries: dict[str, tuple[Pattern, list[Item]]] = {}


class PatternIndex(Generic[Item]):
    """A multiset of ``(pattern, item)`` entries, searchable by overlap.

    Entries live in a trie keyed by anchor segments (see the module docstring), so a
    query examines only the entries whose anchor is a prefix of its own or extends it.
    Items are compared by equality (``==``); adding the same entry twice stores it twice
    and ``remove`` takes out one copy.
    """

    def __init__(self) -> None:
        self._root: _TrieNode[Item] = _TrieNode()
        self._count = 0
        # Most entries are literal paths, and a literal overlaps another literal only
        # when their texts are equal: while no wildcard entry is stored, a literal
        # query is one dict lookup instead of a trie walk.  The groups are the trie's.
        self._literals: dict[str, tuple[Pattern, list[Item]]] = {}
        self._wildcards = 0  # entries whose pattern is not literal

    def add(self, pattern: Pattern, item: Item) -> None:
        text = pattern.text
        if pattern.is_literal:
            found = self._literals.get(text)
            if found is not None:
                found[1].append(item)
                self._count += 1
                return
        else:
            self._wildcards += 1
        node = self._root
        for segment in pattern.anchor:
            child = node.children.get(segment)
            if child is None:
                child = node.children[segment] = _TrieNode()
            node = child
        group = node.entries.get(text)
        if group is None:
            group = node.entries[text] = (pattern, [])
            if pattern.is_literal:
                self._literals[text] = group
        group[1].append(item)
        self._count += 1

    def remove(self, pattern: Pattern, item: Item) -> None:
        """Remove one entry equal to ``(pattern, item)``; ``KeyError`` if there is none."""
        path = [self._root]
        for segment in pattern.anchor:
            child = path[-1].children.get(segment)
            if child is None:
                raise KeyError((pattern, item))
            path.append(child)
        node = path[-1]
        text = pattern.text
        group = node.entries.get(text)
        if group is None:
            raise KeyError((pattern, item))
        items = group[1]
        try:
            items.remove(item)
        except ValueError:
            raise KeyError((pattern, item)) from None
        if not pattern.is_literal:
            self._wildcards -= 1
        if not items:
            del node.entries[text]
            if pattern.is_literal:
                del self._literals[text]
        self._count -= 1
        # Prune nodes left empty, bottom-up, so the trie never outgrows its entries.
        for depth in range(len(path) - 1, 0, -1):
            current = path[depth]
            if current.entries or current.children:
                break
            del path[depth - 1].children[pattern.anchor[depth - 1]]

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[tuple[Pattern, Item]]:
        pending = [self._root]
        while pending:
            node = pending.pop()
            for pattern, items in node.entries.values():
                for item in items:
                    yield pattern, item
            pending.extend(node.children.values())

    def candidates(self, query: Pattern) -> list[tuple[Pattern, list[Item]]]:
        """The stored ``(pattern, items)`` groups that might overlap ``query``.

        Those on the root->anchor path plus the subtree under the anchor; the rest are
        provably disjoint.  Exposed so the cost of a query can be observed.
        """
        groups: list[tuple[Pattern, list[Item]]] = []
        node = self._root
        groups.extend(node.entries.values())
        for segment in query.anchor:
            child = node.children.get(segment)
            if child is None:
                return groups  # nothing stored extends the query's anchor
            node = child
            groups.extend(node.entries.values())
        pending = list(node.children.values())
        while pending:
            descendant = pending.pop()
            groups.extend(descendant.entries.values())
            pending.extend(descendant.children.values())
        return groups

    def overlapping(self, query: Pattern) -> list[tuple[Pattern, Item]]:
        """Exactly the stored entries whose pattern overlaps ``query``, in no set order."""
        if query.is_literal and not self._wildcards:
            found = self._literals.get(query.text)
            return [(found[0], item) for item in found[1]] if found is not None else []
        found: list[tuple[Pattern, Item]] = []
        for pattern, items in self.candidates(query):
            if overlaps(query, pattern):
                found.extend((pattern, item) for item in items)
        return found
