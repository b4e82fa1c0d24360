"""The pure parsers of the merge queue's git side: merge-tree output and conflict hunks."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.landgit import HUNK_LINES, conflict_hunks, parse_merge_tree

TREE = "95c4ca3f1c81ef4e7fad0a8fba1b69e8a4f30e1e"


def test_a_clean_merge_is_its_tree():
    result = parse_merge_tree(f"{TREE}\0".encode())
    assert result.tree == TREE and result.clean and result.conflicts == {}


def test_conflicted_paths_and_their_kinds():
    out = (
        f"{TREE}\0f\0g\0\0"
        "1\0f\0Auto-merging\0Auto-merging f\n\0"
        "1\0f\0CONFLICT (contents)\0CONFLICT (content): Merge conflict in f\n\0"
        "2\0g\0g~x\0CONFLICT (modify/delete)\0CONFLICT (modify/delete): g deleted in x\n\0"
    ).encode()
    result = parse_merge_tree(out)
    assert not result.clean and result.conflicts == {"f": "content", "g": "modify/delete"}


def test_hunks_name_each_side_and_where_it_starts():
    text = "a\n<<<<<<< main\nB1\n=======\nB2\nB3\n>>>>>>> x\nc\n<<<<<<< main\n||||||| base\nold\n=======\nnew\n>>>>>>> x\n"
    assert conflict_hunks(text) == [
        {"line": 2, "ours": ["B1"], "theirs": ["B2", "B3"]},
        {"line": 9, "ours": [], "theirs": ["new"]},
    ]


def test_a_long_hunk_is_cut_with_a_marker():
    text = "<<<<<<< a\n" + "x\n" * 100 + "=======\ny\n>>>>>>> b\n"
    (hunk,) = conflict_hunks(text)
    assert len(hunk["ours"]) == HUNK_LINES + 1 and hunk["ours"][-1] == "…"


@given(st.binary(max_size=300))
def test_arbitrary_output_never_raises(data):
    parse_merge_tree(data)
    conflict_hunks(data.decode("utf-8", "replace"))
