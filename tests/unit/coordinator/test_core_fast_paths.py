"""The core's shortcuts for the common request give what its general code gives
(hypothesis): one path is parsed without the deduplication of several, and the same
path named twice takes the general code."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.core import _parse_new_patterns, _parse_patterns
from protocol.errors import PeerError

TEXTS = st.one_of(
    st.sampled_from(["src/a.py", "./src//a.py", "src/", "src/*.py", "**", "", "/abs", "a/../b", "a\\b", "x\x1b.py", "é/ü.py"]),
    st.text(alphabet="ab./*?[]\\-_\x1b é", max_size=10),
)


def _outcome(parse, paths):
    try:
        return [(p.text, p.is_literal, p.anchor) for p in parse(paths)]
    except PeerError as exc:
        return (exc.code, exc.message)


@given(TEXTS)
def test_one_path_parses_as_the_same_path_named_twice(text):
    for parse in (_parse_patterns, _parse_new_patterns):
        assert _outcome(parse, [text]) == _outcome(parse, [text, text])
