"""Brace expansion as bash does it, bounded (agents/braces.py)."""

from __future__ import annotations

import pytest

from agents.braces import TooMany, expand
from agents.shellwrites import write_targets


@pytest.mark.parametrize(
    ("word", "names"),
    [
        ("src/{a,b}.py", ["src/a.py", "src/b.py"]),
        ("x{a,b}{1,2}", ["xa1", "xa2", "xb1", "xb2"]),
        ("{a,b{c,d}}e", ["ae", "bce", "bde"]),
        ("a{,.bak}", ["a", "a.bak"]),
        ("f{1..3}", ["f1", "f2", "f3"]),
        ("f{3..1}", ["f3", "f2", "f1"]),
        ("f{01..03}", ["f01", "f02", "f03"]),
        ("f{1..7..3}", ["f1", "f4", "f7"]),
        ("{a..c}", ["a", "b", "c"]),
        # literal, as in bash: no comma and no sequence, or one never closed
        ("{}", ["{}"]), ("{a}", ["{a}"]), ("{a..3}", ["{a..3}"]), ("{{a,b}", ["{a", "{b"]), ("plain", ["plain"]),
        ("{x{a,}}", ["{xa}", "{x}"]),
    ],
)
def test_words_expand_as_bash_expands_them(word: str, names: list[str]) -> None:
    assert expand(word, 1000) == names


@pytest.mark.parametrize("word", ["{1..99999999}", "{a,b}" * 11, "{1..999999999999999999}", "{" * 100 + "a,b" + "}" * 100, "x" * 2000 + "{a,b}"])
def test_a_word_past_the_bounds_is_too_many_before_its_names_are_built(word: str) -> None:
    with pytest.raises(TooMany):
        expand(word, 1000)


def test_a_shell_target_with_braces_is_the_files_it_expands_to() -> None:
    # `touch src/{a,b}.py` was read as one file named "src/{a,b}.py": the two it writes were not asked for
    found = write_targets("touch src/{a,b}.py && echo x > docs/{x,y}.md; rm {c,d}/*.py")
    assert found.targets == ["src/a.py", "src/b.py", "docs/x.md", "docs/y.md"]
    assert found.globs == ["c/*.py", "d/*.py"] and found.unknown == []


def test_braces_past_the_commands_bound_are_unknown_not_guessed() -> None:
    found = write_targets("touch f{1..600} g{1..600} h{a,b}")
    assert found.targets == [f"f{i}" for i in range(1, 601)]
    assert len(found.unknown) == 2 and all("too many files" in reason for reason in found.unknown)
