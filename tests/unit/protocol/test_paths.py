"""Tests for protocol.paths: canonical form, matching, overlap and PatternIndex.

The property tests check the module against oracles written independently here: a
regex translation of a pattern (for ``matches``) and a bounded exhaustive search for a
common path (for ``overlaps``).
"""

from __future__ import annotations

import pickle
import re
from functools import lru_cache
from itertools import product
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import paths
from protocol.errors import PeerError
from protocol.paths import (
    MAX_PATTERN_CHARS,
    MAX_SEGMENTS,
    Pattern,
    PatternIndex,
    canonical,
    escape,
    overlaps,
)

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------- canonical

ACCEPTED = [
    ("src/x.py", "src/x.py"),
    ("./src/x.py", "src/x.py"),
    ("././src/x.py", "src/x.py"),
    ("src//x.py", "src/x.py"),
    ("src/./x.py", "src/x.py"),
    ("src/api/", "src/api/"),
    ("src/api//", "src/api/"),
    ("./src/api/./", "src/api/"),
    ("src/.", "src/"),  # '.' names a folder, so the folder form is kept
    ("**", "**"),
    ("**/", "**/"),
    ("src/**/*.py", "src/**/*.py"),
    ("a**b", "a**b"),
    ("[!a]b", "[!a]b"),
    ("[^a]b", "[^a]b"),
    ("[]]", "[]]"),
    ("[!]]", "[!]]"),
    ("[a-]", "[a-]"),
    ("[-a]", "[-a]"),
    ("a]b", "a]b"),
    ("...", "..."),  # only '..' exactly is refused
    ("..x/.y", "..x/.y"),
    (".hidden/x", ".hidden/x"),
    ("with space.txt", "with space.txt"),
    ("x" * MAX_PATTERN_CHARS, "x" * MAX_PATTERN_CHARS),
    # escapes: '*', '?', '[' stay escaped, '\]' is written as the lone ']' it means
    ("app/\\[slug]/page.tsx", "app/\\[slug]/page.tsx"),
    ("a\\*b\\?", "a\\*b\\?"),
    ("a\\]b", "a]b"),
    ("\\*\\*/x", "\\*\\*/x"),
    ("[*]\\*", "[*]\\*"),
    ("/".join(["a"] * MAX_SEGMENTS), "/".join(["a"] * MAX_SEGMENTS)),
]


@pytest.mark.parametrize(("text", "expected"), ACCEPTED)
def test_canonical_accepts_and_normalises(text: str, expected: str) -> None:
    assert canonical(text) == expected
    assert canonical(expected) == expected  # idempotent
    assert Pattern.parse(text).text == expected


REFUSED = [
    "",
    "/",
    "/x",
    "//x",
    "C:/x",
    "c:x",
    "a\\b",
    "\\\\server\\share",
    "a\x00b",
    "..",
    "../x",
    "a/../b",
    "a/..",
    "./../x",
    ".",
    "./",
    ".//.",
    "x" * (MAX_PATTERN_CHARS + 1),
    "/".join(["a"] * (MAX_SEGMENTS + 1)),
    "[ab",
    "a/[b/c]",  # classes do not cross '/', so '[b' is unbalanced
    "[]",
    "[!]",
    "[b-a]",
    "a\\",  # a backslash escaping nothing
    "a\\.b",
    "a\\\\*",
    "[a\\]]",  # no escapes inside a class
    "\\/x",
    None,
    b"src/x.py",
    42,
]


def _mention(text: object) -> str:
    """What a refusal must quote: the input's repr, or its start when huge."""
    if isinstance(text, str) and len(text) > 80:
        return repr(text[:60])
    return repr(text)


@pytest.mark.parametrize("text", REFUSED, ids=lambda text: _mention(text)[:30])
def test_canonical_refuses_with_actionable_message(text: object) -> None:
    with pytest.raises(PeerError) as caught:
        canonical(text)  # type: ignore[arg-type]
    assert caught.value.code == "bad_path"
    assert _mention(text) in caught.value.message


def test_refusal_messages_say_what_to_do() -> None:
    cases = {
        "/src/x.py": "'src/x.py'",
        "/": "'**'",
        ".": "'**'",
        "../x": "resolve it on the client",
        "[ab": "'[[]'",
        "[b-a]": "'a-b'",
    }
    for text, hint in cases.items():
        with pytest.raises(PeerError) as caught:
            canonical(text)
        assert hint in caught.value.message, (text, caught.value.message)


def test_class_matching_nothing_is_refused() -> None:
    with pytest.raises(PeerError, match="matches no character"):
        canonical("[!\x01-\U0010ffff]")
    # A range spanning '/' is fine: '/' is simply not a member.
    assert Pattern("[+-0]").matches("+")
    assert not Pattern("[+-0]").matches("a")


# --------------------------------------------------------------------------- Pattern


@pytest.mark.parametrize(
    ("text", "anchor", "is_literal", "is_folder"),
    [
        ("src/x.py", ("src", "x.py"), True, False),
        ("src/api/", ("src", "api"), False, True),
        ("src/**/*.py", ("src",), False, False),
        ("**/x.py", (), False, False),
        ("**", (), False, False),
        ("a/[b]/c", ("a",), False, False),
        ("a/b?/c", ("a",), False, False),
        ("a]b/c", ("a]b", "c"), True, False),
        ("app/\\[slug]/page.tsx", ("app", "\\[slug]", "page.tsx"), True, False),
        ("app/\\[slug]/*.tsx", ("app", "\\[slug]"), False, False),
    ],
)
def test_pattern_attributes(text: str, anchor: tuple, is_literal: bool, is_folder: bool) -> None:
    pattern = Pattern.parse(text)
    assert pattern.anchor == anchor
    assert pattern.is_literal is is_literal
    assert pattern.is_folder is is_folder
    assert pattern.segments == tuple(segment for segment in text.split("/") if segment)


def test_names_undo_escapes() -> None:
    assert Pattern("app/\\[slug]/page.tsx").names == ("app", "[slug]", "page.tsx")
    assert Pattern("\\*\\*/x\\?").names == ("**", "x?")
    assert Pattern("src/*.py").names == ("src",)


def test_pattern_is_immutable_hashable_and_picklable() -> None:
    pattern = Pattern("./src//x.py")
    assert pattern == Pattern("src/x.py")
    assert hash(pattern) == hash(Pattern("src/x.py"))
    assert len({pattern, Pattern("src/x.py"), Pattern("src/y.py")}) == 2
    assert pattern != Pattern("src/x.py/")
    assert pickle.loads(pickle.dumps(pattern)) == pattern
    assert repr(pattern) == "Pattern('src/x.py')"
    with pytest.raises(AttributeError):
        pattern.text = "other"  # type: ignore[misc]


MATCHES = [
    ("src/x.py", "src/x.py", True),
    ("src/x.py", "./src//x.py", True),
    ("src/x.py", "src/y.py", False),
    ("src/x.py", "src/x.py/z", False),
    ("src/", "src", True),
    ("src/", "src/a/b.py", True),
    ("src/", "srcx/a", False),
    ("src/api/", "src/api/x.py", True),
    ("src/api/", "src/apix.py", False),
    ("src/*.py", "src/main.py", True),
    ("src/*.py", "src/api/x.py", False),
    ("*", "a", True),
    ("*", "a/b", False),
    ("*.py", ".hidden.py", True),
    ("src/a?.py", "src/ab.py", True),
    ("src/a?.py", "src/abc.py", False),
    ("src/a?.py", "src/a.py", False),
    ("[ab].py", "a.py", True),
    ("[ab].py", "c.py", False),
    ("[!ab].py", "c.py", True),
    ("[!ab].py", "a.py", False),
    ("[^ab].py", "c.py", True),
    ("[a-c]x", "bx", True),
    ("[a-c]x", "dx", False),
    ("[]]", "]", True),
    ("[*]", "*", True),
    ("[*]", "a", False),
    ("[?]", "?", True),
    ("[[]x", "[x", True),
    ("**", "a", True),
    ("**", "a/b/c", True),
    ("**/x.py", "x.py", True),  # '**' at the start: zero folders
    ("**/x.py", "a/b/x.py", True),
    ("**/x.py", "a/b/y.py", False),
    ("a/**/b", "a/b", True),  # in the middle
    ("a/**/b", "a/x/y/b", True),
    ("a/**/b", "a/x/y/c", False),
    ("a/**", "a", True),  # at the end: same as the folder 'a/'
    ("a/**", "a/x/y", True),
    ("a/**", "b/x", False),
    ("a/**/", "a/x", True),
    ("a**b", "axyb", True),  # not a whole segment: behaves like '*'
    ("a**b", "ax/yb", False),
    ("***", "abc", True),
    ("***", "a/b", False),
    ("**/test_*.py", "tests/unit/test_x.py", True),
    ("*a*a*", "xaya", True),
    ("*a*a*", "xay", False),
    ("a*b*c", "abbbc", True),
    ("a*b*c", "acb", False),
    # escaped characters are themselves
    ("app/\\[slug]/page.tsx", "app/[slug]/page.tsx", True),
    ("app/\\[slug]/page.tsx", "app/s/page.tsx", False),
    ("app/[slug]/page.tsx", "app/[slug]/page.tsx", False),  # a class: one of s, l, u, g
    ("\\*", "*", True),
    ("\\*", "a", False),
    ("\\?", "?", True),
    ("\\?", "a", False),
    ("\\*\\*/x", "**/x", True),
    ("\\*\\*/x", "a/x", False),
    ("a\\]", "a]", True),
    ("*\\*", "ab*", True),
    ("*\\*", "ab", False),
]


@pytest.mark.parametrize(("pattern", "path", "expected"), MATCHES)
def test_matches(pattern: str, path: str, expected: bool) -> None:
    assert Pattern(pattern).matches(path) is expected


@pytest.mark.parametrize("path", ["", "/abs", "../x", "a/../b", "a\\b"])
def test_matches_refuses_bad_paths(path: str) -> None:
    with pytest.raises(PeerError) as caught:
        Pattern("src/").matches(path)
    assert caught.value.code == "bad_path"


def test_concrete_path_characters_are_literal() -> None:
    # A file may be called 'a[1.txt': as a path (not a pattern) that is fine.
    assert Pattern("*.txt").matches("a[1.txt")
    assert not Pattern("a?").matches("a*b")


# --------------------------------------------------------------------------- overlaps

OVERLAPS = [
    # must conflict
    ("src/a*.py", "src/*b.py", True),
    ("**/test_*.py", "tests/**", True),
    ("src/main.py", "src/", True),
    ("src/", "src/api/x.py", True),
    ("src/*.py", "src/main.py", True),
    ("**", "src/main.py", True),
    ("**", "**/x.py", True),
    ("**", "[ab]", True),
    ("**", "**", True),
    # must not conflict
    ("docs/**", "src/**", False),
    ("docs/", "src/", False),
    ("src/a.py", "src/b.py", False),
    ("src/*.py", "src/api/x.py", False),
    ("src/a?.py", "src/abc.py", False),
    ("[ab].py", "c.py", False),
    # folders
    ("src/api/", "src/api/x.py", True),
    ("src/api/", "src/apix.py", False),
    ("src/api/", "src/*", True),  # 'src/api' itself
    ("src/api/", "src/*/x", True),
    ("src/api/", "src/", True),
    ("src/main.py/", "src/main.py", True),
    ("src/api/", "src/**/*.py", True),
    ("src/api/", "lib/**", False),
    # '**' at start / middle / end
    ("**/a", "**/b", False),
    ("**/a", "x/**", True),
    ("**/a/**", "**/b/**", True),
    ("a/**/b", "a/c/**", True),
    ("a/**/b", "a/**/c", False),
    ("a/**/b", "a/b", True),
    ("a/**", "a", True),
    ("**/x/**", "y", False),
    ("*/a", "b/*", True),
    ("*/a", "b/*/c", False),
    ("a/**/b/**/c", "**/c", True),
    ("a/**/b/**/c", "a/c", False),
    # within a segment
    ("a*", "*a", True),
    ("a*b", "b*a", False),
    ("*ab*", "*ba*", True),
    ("a?", "?b", True),
    ("a?", "b?", False),
    ("???", "*a*a*a*", True),
    ("??", "*a*a*a*", False),
    ("a**b", "a*", True),
    ("a**b", "a/b", False),
    # classes
    ("[ab]", "[bc]", True),
    ("[ab]", "[cd]", False),
    ("[a-m]", "[n-z]", False),
    ("[a-n]", "[n-z]", True),
    ("[!a]", "a", False),
    ("[!a]", "[ab]", True),
    ("[!a]", "[!b]", True),
    ("[!ab]", "[ab]", False),
    ("[^ab]", "?", True),
    ("[!ab]x", "*b", False),
    # escapes: an escaped character is a literal like any other
    ("app/\\[slug]/page.tsx", "app/*/page.tsx", True),
    ("app/\\[slug]/page.tsx", "app/[slug]/page.tsx", False),
    ("app/\\[slug]/page.tsx", "app/\\[slug]/", True),
    ("app/\\[slug]/page.tsx", "app/\\[slug]/page.tsx", True),
    ("app/\\[slug]/page.tsx", "app/\\[id]/page.tsx", False),
    ("a\\*", "a[*]", True),
    ("a\\*", "a?", True),
    ("a\\*", "a*", True),
    ("a\\*", "ab", False),
    ("a\\*", "a[!*]", False),
    ("\\*\\*/x", "**", True),
    ("\\*\\*/x", "a/x", False),
    ("\\*\\*/x", "*/x", True),
    ("x\\?", "x\\*", False),
]


@pytest.mark.parametrize(("first", "second", "expected"), OVERLAPS)
def test_overlaps(first: str, second: str, expected: bool) -> None:
    a, b = Pattern(first), Pattern(second)
    assert overlaps(a, b) is expected
    assert overlaps(b, a) is expected


def test_overlaps_is_conservative_only_for_huge_wildcard_pairs() -> None:
    # Exactly disjoint (one has only a's and b's after stars, the other must end in c)
    # but far beyond EXACT_WORK_LIMIT: answered True, symmetrically, without stalling.
    huge_a, huge_b = Pattern("*a" * 600), Pattern("*b" * 600 + "c")
    assert overlaps(huge_a, huge_b) and overlaps(huge_b, huge_a)
    # Small versions of the same shapes stay exact.
    assert not overlaps(Pattern("*a" * 20), Pattern("*b" * 20 + "c"))
    # The anchor test comes first: distinct literal prefixes stay disjoint at any size.
    assert not overlaps(Pattern("docs/" + "*a" * 600), Pattern("src/" + "*b" * 600))


# --------------------------------------------------------------------------- oracles

ALPHABET = "abc"
# Every concrete segment of length 1..4 over ALPHABET: the bounded witness space.
SEGMENT_UNIVERSE = tuple("".join(chars) for length in range(1, 5) for chars in product(ALPHABET, repeat=length))
MAX_WITNESS_DEPTH = 4


def _segment_regex_source(segment: str) -> str:
    """Translate one non-'**' segment to a regex, independently of protocol.paths."""
    out = []
    index = 0
    while index < len(segment):
        char = segment[index]
        if char == "\\":
            out.append(re.escape(segment[index + 1]))
            index += 2
        elif char == "*":
            out.append("[^/]*")
            index += 1
        elif char == "?":
            out.append("[^/]")
            index += 1
        elif char == "[":
            end = index + 1
            if end < len(segment) and segment[end] in "!^":
                end += 1
            if end < len(segment) and segment[end] == "]":
                end += 1
            end = segment.index("]", end)
            body = segment[index + 1 : end]
            negated = body[:1] in ("!", "^")
            if negated:
                body = body[1:]
            body = body.replace("\\", "\\\\").replace("]", "\\]").replace("^", "\\^").replace("[", "\\[")
            out.append(f"[^/{body}]" if negated else f"[{body}]")
            index = end + 1
        else:
            out.append(re.escape(char))
            index += 1
    return "".join(out)


def _oracle_segments(text: str) -> tuple[str, ...]:
    """A canonical pattern's segments, with the folder form spelled as a final '**'."""
    segments = tuple(segment for segment in text.split("/") if segment)
    return segments + ("**",) if text.endswith("/") else segments


@lru_cache(maxsize=None)
def _oracle_regex(text: str) -> re.Pattern[str]:
    # Matched against path + "/": each segment carries its own trailing slash, so '**'
    # becomes '(?:[^/]+/)*' without special cases at the start, middle or end.
    parts = ["(?:[^/]+/)*" if seg == "**" else _segment_regex_source(seg) + "/" for seg in _oracle_segments(text)]
    return re.compile("".join(parts))


def oracle_matches(text: str, path: str) -> bool:
    return _oracle_regex(text).fullmatch(path + "/") is not None


@lru_cache(maxsize=None)
def _oracle_segment_matches(segment: str, name: str) -> bool:
    return re.fullmatch(_segment_regex_source(segment), name) is not None


def bounded_witness(first: str, second: str, universe: tuple[str, ...] = SEGMENT_UNIVERSE) -> str | None:
    """A path of depth <= 4 over SEGMENT_UNIVERSE matching both patterns, or None.

    Equivalent to trying every such path, but done as a breadth-first walk over pairs of
    NFA position sets so that paths leading to the same pair are explored once.
    """
    a, b = _oracle_segments(first), _oracle_segments(second)

    def closure(positions: set[int], segments: tuple[str, ...]) -> frozenset[int]:
        result = set(positions)
        for position in sorted(result):
            while position < len(segments) and segments[position] == "**":
                position += 1
                result.add(position)
        return frozenset(result)

    def step(positions: frozenset[int], segments: tuple[str, ...], name: str) -> frozenset[int]:
        reached = set()
        for position in positions:
            if position < len(segments):
                if segments[position] == "**":
                    reached.add(position)
                elif _oracle_segment_matches(segments[position], name):
                    reached.add(position + 1)
        return closure(reached, segments)

    start = (closure({0}, a), closure({0}, b))
    frontier = {start: ""}
    seen = {start}
    for _ in range(MAX_WITNESS_DEPTH):
        next_frontier = {}
        for (positions_a, positions_b), prefix in frontier.items():
            for name in universe:
                after_a = step(positions_a, a, name)
                if not after_a:
                    continue
                after_b = step(positions_b, b, name)
                if not after_b:
                    continue
                path = f"{prefix}/{name}" if prefix else name
                if len(a) in after_a and len(b) in after_b:
                    return path
                state = (after_a, after_b)
                if state not in seen:
                    seen.add(state)
                    next_frontier[state] = path
        frontier = next_frontier
    return None


def witness_bound_fits(first: str, second: str) -> bool:
    """Whether a shortest common path provably fits the bounded witness space.

    In a shortest common path every segment advances a non-'**' segment of at least one
    pattern (a segment eaten by two '**' can be dropped), so depth <= n_a + n_b.  Within a
    segment every character advances a non-'*' token of at least one side, so a segment
    needs at most k_a + k_b characters (one if both are all stars).  We generate segments
    with at most two non-star tokens, so lengths never exceed 4; only the depth needs a
    check.  The alphabet needs no check: generated tokens use only 'a' and 'b', so any
    two token sets that intersect at all share 'a', 'b' or (both containing it) 'c'.
    """
    plain = [seg for seg in _oracle_segments(first) + _oracle_segments(second) if seg != "**"]
    return len(plain) <= MAX_WITNESS_DEPTH


# --------------------------------------------------------------------------- strategies

# Literals are listed twice so that segments are often specific enough to be disjoint.
CHAR_TOKENS = ["a", "b", "a", "b", "?", "[ab]", "[a-b]", "[!a]", "[^b]", "[!ab]"]


# With escapes: literal '*' and '[' beside the wildcards and classes that admit them.
# Any two of these token sets that intersect share 'a', '*', '[' or (both negated) 'c',
# so ESCAPE_UNIVERSE over "a*[c" keeps the bounded search exact, as for CHAR_TOKENS.
ESCAPE_TOKENS = ["a", "a", "\\*", "\\*", "\\[", "?", "[*]", "[!a]", "[!*]", "[a[]"]
ESCAPE_ALPHABET = "a*[c"
ESCAPE_UNIVERSE = tuple("".join(chars) for length in range(1, 5) for chars in product(ESCAPE_ALPHABET, repeat=length))


@st.composite
def segments(draw: st.DrawFn, tokens_from: list[str] = CHAR_TOKENS) -> str:
    if draw(st.integers(0, 5)) == 0:
        return "**"
    tokens = draw(st.lists(st.sampled_from(tokens_from), min_size=0, max_size=2))
    # A star may sit before, between and after the (at most two) non-star tokens.  Stars
    # are kept sparse: with many of them nearly every pair overlaps, and the interesting
    # (disjoint) answers would be rare.
    star_flags = st.integers(0, 2).map(lambda roll: roll == 0)
    stars = draw(st.lists(star_flags, min_size=len(tokens) + 1, max_size=len(tokens) + 1))
    out = []
    for index, star in enumerate(stars):
        if star:
            out.append("*")
        if index < len(tokens):
            out.append(tokens[index])
    text = "".join(out)
    return text or "*"


@st.composite
def pattern_texts(draw: st.DrawFn, tokens_from: list[str] = CHAR_TOKENS) -> str:
    parts = draw(st.lists(segments(tokens_from), min_size=1, max_size=3))
    text = "/".join(parts)
    is_folder = draw(st.integers(0, 3)) == 0
    return text + "/" if is_folder else text


literal_segments = st.text(alphabet="ab", min_size=1, max_size=2)


@st.composite
def index_pattern_texts(draw: st.DrawFn) -> str:
    """Patterns with literal prefixes, so the trie has depth: literals, folders, globs."""
    prefix = draw(st.lists(literal_segments, min_size=0, max_size=3))
    kind = draw(st.sampled_from(["literal", "folder", "glob"]))
    if kind == "literal":
        return "/".join(prefix + [draw(literal_segments)])
    if kind == "folder" and prefix:
        return "/".join(prefix) + "/"
    return "/".join(prefix + [draw(pattern_texts())])


concrete_paths = st.lists(st.text(alphabet=ALPHABET, min_size=1, max_size=4), min_size=1, max_size=4).map("/".join)
escape_patterns = pattern_texts(ESCAPE_TOKENS)
escape_paths = st.lists(st.text(alphabet=ESCAPE_ALPHABET, min_size=1, max_size=4), min_size=1, max_size=4).map("/".join)


# --------------------------------------------------------------------------- properties


@FAST
@given(pattern_texts(), concrete_paths)
def test_matches_agrees_with_regex_oracle(text: str, path: str) -> None:
    assert Pattern(text).matches(path) is oracle_matches(canonical(text), path)


@FAST
@given(pattern_texts(), pattern_texts())
def test_overlaps_is_symmetric(first: str, second: str) -> None:
    a, b = Pattern(first), Pattern(second)
    assert overlaps(a, b) is overlaps(b, a)


@FAST
@given(pattern_texts(), pattern_texts(), st.lists(concrete_paths, min_size=1, max_size=20))
def test_overlaps_has_no_false_negatives_on_sampled_paths(first: str, second: str, sample: list[str]) -> None:
    a, b = Pattern(first), Pattern(second)
    for path in sample:
        if a.matches(path) and b.matches(path):
            assert overlaps(a, b), f"{path!r} matches both {a} and {b}"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern_texts(), pattern_texts())
def test_overlaps_is_exact_on_bounded_language(first: str, second: str) -> None:
    a, b = Pattern(first), Pattern(second)
    witness = bounded_witness(a.text, b.text)
    if witness is not None:
        # No false negatives, and the witness really matches both (cross-checks matches).
        assert a.matches(witness) and b.matches(witness)
        assert overlaps(a, b), f"{witness!r} matches both {a} and {b}"
    elif witness_bound_fits(a.text, b.text):
        # No false positives: a common path would have to lie in the searched space.
        assert not overlaps(a, b), f"no path of the bounded space matches both {a} and {b}"


@FAST
@given(escape_patterns, escape_paths)
def test_matches_agrees_with_regex_oracle_with_escapes(text: str, path: str) -> None:
    assert Pattern(text).matches(path) is oracle_matches(canonical(text), path)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(escape_patterns, escape_patterns)
def test_overlaps_is_exact_with_escapes(first: str, second: str) -> None:
    """The overlap theory unchanged: an escaped character is a literal token."""
    a, b = Pattern(first), Pattern(second)
    assert overlaps(a, b) is overlaps(b, a)
    witness = bounded_witness(a.text, b.text, ESCAPE_UNIVERSE)
    if witness is not None:
        assert a.matches(witness) and b.matches(witness)
        assert overlaps(a, b), f"{witness!r} matches both {a} and {b}"
    elif witness_bound_fits(a.text, b.text):
        assert not overlaps(a, b), f"no path of the bounded space matches both {a} and {b}"


path_names = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/\\"), min_size=1, max_size=8).filter(
    lambda name: name not in (".", "..")
)


# A first name like 'C:' reads as a Windows drive, which paths refuse on purpose.
concrete_paths = st.lists(path_names, min_size=1, max_size=4).filter(lambda names: not paths._WINDOWS_DRIVE.match(names[0]))


@FAST
@given(concrete_paths, concrete_paths)
def test_escape_names_exactly_one_path(names: list[str], other: list[str]) -> None:
    """Whatever a concrete path holds, escape(path) is a literal that matches it alone,
    and two escaped paths overlap exactly when they are the same path."""
    path, other_path = "/".join(names), "/".join(other)
    pattern = Pattern(escape(path))
    assert pattern.is_literal and pattern.names == tuple(names)
    assert pattern.matches(path)
    assert pattern.matches(other_path) is (names == other)
    assert overlaps(pattern, Pattern(escape(other_path))) is (names == other)
    assert canonical(pattern.text) == pattern.text


def test_index_finds_escaped_literals() -> None:
    index: PatternIndex[str] = PatternIndex()
    index.add(Pattern(escape("app/[slug]/page.tsx")), "alice")
    index.add(Pattern("app/[s]lug/page.tsx"), "bob")
    found = index.overlapping(Pattern("app/*/page.tsx"))
    assert sorted(item for _, item in found) == ["alice", "bob"]
    assert [item for _, item in index.overlapping(Pattern("app/\\[slug]/page.tsx"))] == ["alice"]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(index_pattern_texts(), st.integers(0, 3)), max_size=25),
    st.lists(index_pattern_texts(), min_size=1, max_size=5),
    st.data(),
)
def test_index_agrees_with_brute_force(entries: list, queries: list[str], data: st.DataObject) -> None:
    index: PatternIndex[int] = PatternIndex()
    stored = []
    for text, item in entries:
        entry = (Pattern(text), item)
        index.add(*entry)
        stored.append(entry)

    def check() -> None:
        assert len(index) == len(stored)
        assert sorted(index, key=repr) == sorted(stored, key=repr)
        for text in queries:
            query = Pattern(text)
            expected = [entry for entry in stored if overlaps(query, entry[0])]
            assert sorted(index.overlapping(query), key=repr) == sorted(expected, key=repr)

    check()
    # Remove a random part and check again: removal must keep the trie consistent.
    removals = data.draw(st.lists(st.integers(0, max(len(stored) - 1, 0)), max_size=len(stored)))
    for position in removals:
        if position < len(stored):
            entry = stored.pop(position)
            index.remove(*entry)
    check()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.booleans(), index_pattern_texts(), st.integers(0, 3)), max_size=30), st.lists(index_pattern_texts(), min_size=1, max_size=5))
def test_index_lookups_of_literals_agree_with_brute_force_as_wildcards_come_and_go(steps: list, queries: list[str]) -> None:
    """A literal query takes a dict lookup while no wildcard entry is stored and the
    trie walk otherwise: both must give exactly the overlapping entries, whichever
    entries were added and removed before."""
    index: PatternIndex[int] = PatternIndex()
    stored: list[tuple[Pattern, int]] = []
    for add, text, item in steps:
        entry = (Pattern(text), item)
        if add or entry not in stored:
            index.add(*entry)
            stored.append(entry)
        else:
            index.remove(*entry)
            stored.remove(entry)
        for query in [Pattern(q) for q in queries] + [p for p, _ in stored]:
            expected = [e for e in stored if overlaps(query, e[0])]
            assert sorted(index.overlapping(query), key=repr) == sorted(expected, key=repr)


# --------------------------------------------------------------------------- index


def test_index_basics() -> None:
    index: PatternIndex[str] = PatternIndex()
    index.add(Pattern("src/"), "alice")
    index.add(Pattern("docs/**"), "bob")
    index.add(Pattern("**/test_*.py"), "carol")
    index.add(Pattern("src/api/x.py"), "dave")
    assert len(index) == 4
    found = index.overlapping(Pattern("src/api/x.py"))
    assert sorted(item for _, item in found) == ["alice", "dave"]
    found = index.overlapping(Pattern("tests/**"))
    assert sorted(item for _, item in found) == ["carol"]
    found = index.overlapping(Pattern("**"))
    assert sorted(item for _, item in found) == ["alice", "bob", "carol", "dave"]
    assert index.overlapping(Pattern("lib/x.c")) == []


def test_index_remove_uses_equality_and_keeps_duplicates_apart() -> None:
    index: PatternIndex[list[str]] = PatternIndex()
    pattern = Pattern("src/x.py")
    index.add(pattern, ["a"])
    index.add(Pattern("./src//x.py"), ["a"])  # same entry again: stored twice
    assert len(index) == 2
    index.remove(Pattern("src/x.py"), ["a"])  # equal, not identical, objects
    assert len(index) == 1
    assert index.overlapping(pattern) == [(pattern, ["a"])]
    with pytest.raises(KeyError):
        index.remove(pattern, ["b"])
    with pytest.raises(KeyError):
        index.remove(Pattern("src/y.py"), ["a"])
    with pytest.raises(KeyError):
        index.remove(Pattern("lib/x.py"), ["a"])
    index.remove(pattern, ["a"])
    assert len(index) == 0
    assert list(index) == []


def test_index_prunes_empty_nodes() -> None:
    index: PatternIndex[int] = PatternIndex()
    index.add(Pattern("a/b/c/d.py"), 1)
    index.add(Pattern("a/b/"), 2)
    index.add(Pattern("**/x"), 3)
    index.remove(Pattern("a/b/c/d.py"), 1)
    # White-box: the trie itself must shrink, not just hide the entry.
    assert list(index._root.children) == ["a"]
    assert list(index._root.children["a"].children["b"].children) == []
    index.remove(Pattern("a/b/"), 2)
    assert index._root.children == {}
    index.remove(Pattern("**/x"), 3)
    assert index._root.children == {} and index._root.entries == {}


def _build_index(directories: int) -> PatternIndex[int]:
    """Per directory: 'pkgN/', 'pkgN/**' and 18 files two levels down - 20 entries."""
    index: PatternIndex[int] = PatternIndex()
    for directory in range(directories):
        index.add(Pattern(f"pkg{directory}/"), directory)
        index.add(Pattern(f"pkg{directory}/**"), directory)
        for module in range(3):
            for file in range(6):
                index.add(Pattern(f"pkg{directory}/mod{module}/file{file}.py"), directory)
    return index


def test_index_query_cost_does_not_grow_with_size(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0
    real_overlaps = paths.overlaps

    def counting_overlaps(a: Pattern, b: Pattern) -> bool:
        nonlocal calls
        calls += 1
        return real_overlaps(a, b)

    monkeypatch.setattr(paths, "overlaps", counting_overlaps)
    query = Pattern("pkg0/mod1/file4.py")

    small = PatternIndex[int]()
    for entry in list(_build_index(1))[:10]:
        small.add(*entry)
    small.add(query, 0)
    assert len(small) == 11
    small.overlapping(query)
    small_calls, calls = calls, 0

    big = _build_index(500)
    assert len(big) == 10_000
    found = big.overlapping(query)
    big_calls, calls = calls, 0

    # 'pkg0/', 'pkg0/**' and the file itself: the 9,997 others are never looked at.
    assert sorted(pattern.text for pattern, _ in found) == ["pkg0/", "pkg0/**", "pkg0/mod1/file4.py"]
    assert big_calls == len(big.candidates(query)) == 3
    assert big_calls <= small_calls + 2

    # A folder query examines its own subtree (20 entries), not the whole index.
    big.overlapping(Pattern("pkg7/"))
    assert calls == 20
    calls = 0
    # A path in no stored directory examines nothing.
    assert big.overlapping(Pattern("elsewhere/x.py")) == []
    assert calls == 0


@given(st.text(alphabet="ab.-_/*?[]\\:~é ", min_size=1, max_size=12))
def test_the_plain_path_shortcut_builds_what_the_general_parse_builds(text):
    plain = paths._plain_segments(text)
    if plain is None:
        return
    segments, is_folder = paths._split_checked(text, escapes=True)
    assert plain == segments and not is_folder
    assert all(paths._scan_segment(s) == (s, False, s) for s in segments)
    pattern = paths.Pattern(text)
    assert (pattern.text, pattern.anchor, pattern.names, pattern.is_literal) == (text, segments, segments, True)
    assert pattern.matches(text) and pattern._size == sum(len(s) + 1 for s in segments)


def test_plain_paths_take_the_shortcut_and_others_do_not():
    assert paths._plain_segments("src/app.py") == ("src", "app.py")
    assert paths._plain_segments("a_b/c-d/e+f@g,h=i~j%k.py") == ("a_b", "c-d", "e+f@g,h=i~j%k.py")
    for text in [
        "src//app.py", "./src", "src/", "src/./a", "a/../b", "/abs", "c:x", "a*", "a\\*", "", "a b", "x" * 5000,
        "/", "a//", "café/x.py", "a\x00b", "a\tb", "..", ".", 7, None,
    ]:
        assert paths._plain_segments(text) is None, text


def _slots(pattern: Pattern) -> dict:
    return {name: getattr(pattern, name) for name in paths._PatternSlots.__slots__}


@given(
    st.one_of(
        st.text(alphabet="ab.-_/*?[]\\:~é \x00", min_size=1, max_size=12),
        st.from_regex(r"[A-Za-z0-9_.+@,=~%-]{1,6}(/[A-Za-z0-9_.+@,=~%-]{1,6}){0,5}", fullmatch=True),
        st.text(max_size=16),
    )
)
def test_a_pattern_built_by_the_plain_path_shortcut_is_the_general_parse(text):
    """Whatever the shortcut takes, the general parse (the shortcut turned off) accepts
    and builds the same pattern, slot for slot."""
    if paths._plain_segments(text) is None:
        return
    shortcut = Pattern(text)
    with patch.object(paths, "_plain_segments", lambda _: None):
        general = Pattern(text)
    assert type(shortcut) is type(general) is Pattern
    assert _slots(shortcut) == _slots(general)


def test_a_pattern_is_immutable_once_built():
    for text in ["src/x.py", "src/*.py", "src/"]:
        pattern = Pattern(text)
        with pytest.raises(AttributeError):
            pattern.text = "other"  # type: ignore[misc]
        with pytest.raises(AttributeError):
            pattern.is_literal = False  # type: ignore[misc]
        with pytest.raises(AttributeError):
            del pattern.segments
        assert pattern.text == text and Pattern.parse(text) == pattern
